// Stream listeners for tcp://, tls+tcp://, ws:// and wss://; see listener.h.
//
// Ownership: a listener owns its nng_stream_listener, its accept aio and
// one reference on its current TLS configuration, plus one on the previous
// configuration after a reload. NNG's TLS listener reads its configuration
// pointer without a lock when it prepares the next accept, so the previous
// one is kept alive until the reload after next.
//
// tcp:// listeners do not use NNG: the listening socket sits in one
// worker's epoll set, and accepted sockets become plain-socket connections
// spread over the workers (conn_alloc_fd), so that plain MQTT needs no NNG
// hand-off per read or write (docs/decisions/0003-plain-tcp-event-loops.md).
// ws:// listeners are the same sockets with the WebSocket layer of conn.c
// on top; wss:// is NNG's tls+tcp stream with that same layer
// (docs/decisions/0002-websocket.md).
//
// Accepted connections point at their listener (conn_set_tag). A stopped
// listener is therefore never freed: its sockets and TLS configurations are
// released and the small struct is parked on a list that stays reachable.
#include "nng/transport/listener.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <nng/supplemental/tls/tls.h>

#include <mbedtls/error.h>
#include <mbedtls/pk.h>
#include <mbedtls/pkcs5.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/x509_crt.h>

// Largest PEM file we read (a CA bundle is ~200 KB).
#define PEM_MAX (4u << 20)
// Pause before accepting again after an accept error (out of descriptors).
#define ACCEPT_BACKOFF_MS 100

enum listener_kind {
	KIND_TCP,
	KIND_TLS,
	KIND_WS,
	KIND_WSS,
};

struct nmq_listener {
	// tcp://: our own socket in worker `owner`'s epoll set.
	int      lfd;
	int      owner;
	int      port;
	workq_io io;
	bool     watching; // lfd is in the epoll set (mtx)
	// The accept backoff: a one-shot timer in the same epoll set, so that
	// a TCP-only broker never starts NNG (and its threads).
	int      tfd;
	workq_io tio;
	// others: NNG's stream listener.
	nng_stream_listener *l;
	nng_aio             *aio;
	const conn_env      *env;
	listener_accept_fn   fn;
	void                *arg;
	enum listener_kind   kind;
	char                 name[64];
	char                 url[256];
	char                 ws_path[128]; // ws/wss: the path served

	pthread_mutex_t mtx;
	bool            stopping; // guarded by mtx
	bool            sleeping; // an accept backoff is running (mtx)
	nng_tls_config *tls; // current configuration (mtx)
	nng_tls_config *tls_prev; // kept for NNG's unlocked read (mtx)
	atomic_bool     verify_peer;
	atomic_uint     max_conns; // 0 = no limit
	atomic_uint     n_conns; // connections accepted and not destroyed
	atomic_bool     fail_if_no_peer_cert;

	struct nmq_listener *retired_next;
};

static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;
static nmq_listener   *retired;

static void adopt(nmq_listener *l, nmq_conn *c);

// Returns the transport of a URL from its scheme, or -1 if unsupported.
static int url_kind(const char *url)
{
	if (strncmp(url, "tcp://", 6) == 0) {
		return KIND_TCP;
	}
	if (strncmp(url, "tls+tcp://", 10) == 0) {
		return KIND_TLS;
	}
	if (strncmp(url, "ws://", 5) == 0) {
		return KIND_WS;
	}
	if (strncmp(url, "wss://", 6) == 0) {
		return KIND_WSS;
	}
	return -1;
}

// Splits "scheme://host:port[/path]" (host may be "[v6]" or empty) into
// host, port and path ("/" when none). Returns 0 or -1.
static int split_url(
    const char *url, char *host, size_t hlen, char *port, size_t plen, char *path, size_t pathlen)
{
	const char *h = strchr(url, ':'); // the scheme has none
	if (h == NULL || h[1] != '/' || h[2] != '/') {
		return -1;
	}
	h += 3;
	const char *slash = strchr(h, '/');
	const char *end   = slash != NULL ? slash : h + strlen(h);
	const char *colon;
	size_t      n;
	if (*h == '[') {
		const char *rb = memchr(h, ']', (size_t)(end - h));
		if (rb == NULL || rb[1] != ':') {
			return -1;
		}
		n     = (size_t)(rb - h - 1);
		h     = h + 1;
		colon = rb + 1;
	} else {
		colon = NULL;
		for (const char *q = h; q < end; q++) {
			if (*q == ':') {
				colon = q;
			}
		}
		if (colon == NULL) {
			return -1;
		}
		n = (size_t)(colon - h);
	}
	size_t pn = (size_t)(end - colon - 1);
	if (n >= hlen || pn >= plen || pn == 0) {
		return -1;
	}
	memcpy(host, h, n);
	host[n] = '\0';
	memcpy(port, colon + 1, pn);
	port[pn] = '\0';
	for (size_t i = 0; i < pn; i++) {
		if (port[i] < '0' || port[i] > '9') {
			return -1;
		}
	}
	if (path != NULL) {
		const char *pp = slash != NULL ? slash : "/";
		if (strlen(pp) >= pathlen) {
			return -1;
		}
		snprintf(path, pathlen, "%s", pp);
	}
	return 0;
}

// ---------------------------------------------------------------------------
// TLS configuration from files

// Formats an mbed TLS error code as text.
static void mbed_reason(int rv, char *buf, size_t len)
{
	mbedtls_strerror(rv, buf, len);
	if (buf[0] == '\0') {
		snprintf(buf, len, "mbed TLS error -0x%04x", (unsigned)-rv);
	}
}

// Reads a whole PEM file into a NUL-terminated heap buffer. Returns 0, or
// an NNG error with "<name>: <key> <path>: <reason>" in err.
static int pem_read(const char *name, const char *key, const char *path, char **out, size_t *outlen,
    char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long  n;
	if (f == NULL) {
		snprintf(
		    err, errlen, "%s: %s %s: cannot open: %s", name, key, path, strerror(errno));
		return NNG_ENOENT;
	}
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
		snprintf(
		    err, errlen, "%s: %s %s: cannot read: %s", name, key, path, strerror(errno));
		fclose(f);
		return NNG_EINVAL;
	}
	if ((unsigned long)n > PEM_MAX) {
		snprintf(err, errlen, "%s: %s %s: larger than %u bytes", name, key, path, PEM_MAX);
		fclose(f);
		return NNG_EINVAL;
	}
	if ((buf = malloc((size_t)n + 1)) == NULL) {
		snprintf(err, errlen, "%s: %s %s: out of memory", name, key, path);
		fclose(f);
		return NNG_ENOMEM;
	}
	size_t got = fread(buf, 1, (size_t)n, f);
	if (ferror(f) != 0) {
		snprintf(
		    err, errlen, "%s: %s %s: cannot read: %s", name, key, path, strerror(errno));
		free(buf);
		fclose(f);
		return NNG_EINVAL;
	}
	fclose(f);
	buf[got] = '\0';
	if (memchr(buf, '\0', got) != NULL || strstr(buf, "-----BEGIN ") == NULL) {
		snprintf(err, errlen, "%s: %s %s: not a PEM file", name, key, path);
		free(buf);
		return NNG_EINVAL;
	}
	*out    = buf;
	*outlen = got;
	return 0;
}

// Wipes and frees a buffer that held key material.
static void secret_free(char *p, size_t len)
{
	if (p != NULL) {
		mbedtls_platform_zeroize(p, len);
		free(p);
	}
}

// The PEM texts of one TLS listener.
typedef struct tls_files {
	char  *cert;
	size_t cert_len;
	char  *key;
	size_t key_len;
	char  *ca;
	size_t ca_len;
} tls_files;

static void tls_files_free(tls_files *f)
{
	free(f->cert);
	secret_free(f->key, f->key_len);
	free(f->ca);
	memset(f, 0, sizeof(*f));
}

// Reads and checks the TLS files of o: every file parses, the key opens
// with the password and matches the certificate. Returns 0 with the texts
// in *f (free with tls_files_free), or an NNG error with a message naming
// the file in err.
static int tls_files_load(const listener_opts *o, tls_files *f, char *err, size_t errlen)
{
	const char        *name = o->name != NULL ? o->name : "listener";
	char               why[160];
	mbedtls_x509_crt   crt;
	mbedtls_pk_context pk;
	int                rv;

	memset(f, 0, sizeof(*f));
	if (o->certfile == NULL || o->certfile[0] == '\0' || o->keyfile == NULL
	    || o->keyfile[0] == '\0') {
		snprintf(err, errlen, "%s: certfile and keyfile are required for TLS", name);
		return NNG_EINVAL;
	}
	if (o->verify_peer && (o->cacertfile == NULL || o->cacertfile[0] == '\0')) {
		snprintf(err, errlen, "%s: verify_peer needs cacertfile", name);
		return NNG_EINVAL;
	}
	if ((rv = pem_read(name, "certfile", o->certfile, &f->cert, &f->cert_len, err, errlen)) != 0
	    || (rv = pem_read(name, "keyfile", o->keyfile, &f->key, &f->key_len, err, errlen))
	        != 0) {
		tls_files_free(f);
		return rv;
	}
	if (o->cacertfile != NULL && o->cacertfile[0] != '\0'
	    && (rv = pem_read(name, "cacertfile", o->cacertfile, &f->ca, &f->ca_len, err, errlen))
	        != 0) {
		tls_files_free(f);
		return rv;
	}

	mbedtls_x509_crt_init(&crt);
	mbedtls_pk_init(&pk);
	rv = mbedtls_x509_crt_parse(&crt, (const unsigned char *)f->cert, f->cert_len + 1);
	if (rv < 0 || crt.version == 0) {
		mbed_reason(rv, why, sizeof(why));
		snprintf(err, errlen, "%s: certfile %s: no valid certificate (%s)", name,
		    o->certfile, why);
		goto fail;
	}
	const char *pass = o->key_password;
	rv               = mbedtls_pk_parse_key(&pk, (const unsigned char *)f->key, f->key_len + 1,
	                  (const unsigned char *)pass, pass != NULL ? strlen(pass) : 0);
	if (rv == MBEDTLS_ERR_PK_PASSWORD_REQUIRED) {
		snprintf(err, errlen,
		    "%s: keyfile %s: the key is encrypted and key_password is not set", name,
		    o->keyfile);
		goto fail;
	}
	if (rv == MBEDTLS_ERR_PK_PASSWORD_MISMATCH) {
		snprintf(err, errlen, "%s: keyfile %s: wrong key_password", name, o->keyfile);
		goto fail;
	}
	if (rv == MBEDTLS_ERR_PKCS5_FEATURE_UNAVAILABLE) {
		snprintf(err, errlen,
		    "%s: keyfile %s: this key encryption is not supported by mbed TLS 2.28 "
		    "(re-encrypt it with: openssl rsa -aes256 -traditional, or openssl pkcs8 "
		    "-topk8 -v2 des3)",
		    name, o->keyfile);
		goto fail;
	}
	if (rv != 0) {
		mbed_reason(rv, why, sizeof(why));
		snprintf(err, errlen, "%s: keyfile %s: no valid private key (%s)", name, o->keyfile,
		    why);
		goto fail;
	}
	if (mbedtls_pk_check_pair(&crt.pk, &pk) != 0) {
		snprintf(err, errlen, "%s: keyfile %s does not match certfile %s", name, o->keyfile,
		    o->certfile);
		goto fail;
	}
	mbedtls_x509_crt_free(&crt);
	mbedtls_pk_free(&pk);
	if (f->ca != NULL) {
		mbedtls_x509_crt_init(&crt);
		rv      = mbedtls_x509_crt_parse(&crt, (const unsigned char *)f->ca, f->ca_len + 1);
		bool ok = rv >= 0 && crt.version != 0;
		mbedtls_x509_crt_free(&crt);
		if (!ok) {
			mbed_reason(rv, why, sizeof(why));
			snprintf(err, errlen, "%s: cacertfile %s: no valid certificate (%s)", name,
			    o->cacertfile, why);
			tls_files_free(f);
			return NNG_EINVAL;
		}
	}
	return 0;
fail:
	mbedtls_x509_crt_free(&crt);
	mbedtls_pk_free(&pk);
	tls_files_free(f);
	return NNG_EINVAL;
}

// Builds a server TLS configuration on our engine from the files of o.
// Returns 0 with *cfgp holding one reference, or an NNG error with a
// message in err.
static int tls_config_build(const listener_opts *o, nng_tls_config **cfgp, char *err, size_t errlen)
{
	const char     *name = o->name != NULL ? o->name : "listener";
	nng_tls_config *cfg  = NULL;
	tls_files       f;
	int             rv;

	if ((rv = tls_engine_init()) != 0) {
		snprintf(err, errlen, "%s: TLS is not available: %s", name, nng_strerror(rv));
		return rv;
	}
	if ((rv = tls_files_load(o, &f, err, errlen)) != 0) {
		return rv;
	}
	nng_tls_auth_mode mode = NNG_TLS_AUTH_MODE_NONE;
	if (o->verify_peer) {
		mode = o->fail_if_no_peer_cert ? NNG_TLS_AUTH_MODE_REQUIRED
		                               : NNG_TLS_AUTH_MODE_OPTIONAL;
	}
	if ((rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_SERVER)) != 0) {
		snprintf(
		    err, errlen, "%s: cannot create TLS configuration: %s", name, nng_strerror(rv));
		goto fail;
	}
	if ((rv = nng_tls_config_own_cert(cfg, f.cert, f.key, o->key_password)) != 0) {
		snprintf(err, errlen, "%s: certfile %s / keyfile %s: %s", name, o->certfile,
		    o->keyfile, nng_strerror(rv));
		goto fail;
	}
	if (f.ca != NULL && (rv = nng_tls_config_ca_chain(cfg, f.ca, NULL)) != 0) {
		snprintf(
		    err, errlen, "%s: cacertfile %s: %s", name, o->cacertfile, nng_strerror(rv));
		goto fail;
	}
	if ((rv = nng_tls_config_auth_mode(cfg, mode)) != 0) {
		snprintf(err, errlen, "%s: TLS auth mode: %s", name, nng_strerror(rv));
		goto fail;
	}
	tls_files_free(&f);
	*cfgp = cfg;
	return 0;
fail:
	if (cfg != NULL) {
		nng_tls_config_free(cfg);
	}
	tls_files_free(&f);
	return rv;
}

// Checks TLS files without opening sockets; see listener.h.
int listener_tls_check(const listener_opts *opts, char *err, size_t errlen)
{
	tls_files f;
	int       kind = url_kind(opts->url != NULL ? opts->url : "");
	if (kind != KIND_TLS && kind != KIND_WSS) {
		return 0;
	}
	int rv = tls_files_load(opts, &f, err, errlen);
	if (rv == 0) {
		tls_files_free(&f);
	}
	return rv;
}

// ---------------------------------------------------------------------------
// Accepting

// ---------------------------------------------------------------------------
// Plain TCP: our own listening socket

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
		nmq_conn *c = conn_alloc_fd(fd, l->env);
		if (c == NULL) {
			close(fd);
			continue;
		}
		adopt(l, c);
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
	    && workq_io_add(l->env->wq, l->owner, l->lfd, &l->io, EPOLLIN) == 0) {
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

// Opens, binds and watches a tcp:// listening socket. Returns 0 or an NNG
// error with a message in err.
static int raw_listen(nmq_listener *l, char *err, size_t errlen)
{
	char                    host[256];
	char                    port[16];
	char                    why[128];
	struct sockaddr_storage sa;
	socklen_t               salen;
	if (split_url(l->url, host, sizeof(host), port, sizeof(port), NULL, 0) != 0) {
		snprintf(err, errlen, "%s: %s: expected %s://host:port", l->name, l->url,
		    l->kind == KIND_WS ? "ws" : "tcp");
		return NNG_EADDRINVAL;
	}
	if (resolve_bind(host, port, &sa, &salen, why, sizeof(why)) != 0) {
		snprintf(err, errlen, "%s: %s: %s", l->name, l->url, why);
		return NNG_EADDRINVAL;
	}
	l->lfd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l->lfd < 0) {
		snprintf(err, errlen, "%s: %s: socket: %s", l->name, l->url, strerror(errno));
		return NNG_ENOMEM;
	}
	int one = 1;
	setsockopt(l->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l->lfd, (struct sockaddr *)&sa, salen) != 0 || listen(l->lfd, 1024) != 0) {
		int e = errno;
		snprintf(err, errlen, "%s: cannot listen on %s: %s", l->name, l->url, strerror(e));
		return e == EADDRINUSE ? NNG_EADDRINUSE : NNG_EADDRINVAL;
	}
	salen = sizeof(sa);
	if (getsockname(l->lfd, (struct sockaddr *)&sa, &salen) == 0) {
		l->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
		                                         : ((struct sockaddr_in *)&sa)->sin_port);
	}
	l->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (l->tfd < 0) {
		snprintf(err, errlen, "%s: %s: timerfd: %s", l->name, l->url, strerror(errno));
		return NNG_ENOMEM;
	}
	l->io.fn  = raw_accept_io;
	l->tio.fn = raw_backoff_io;
	l->owner  = workq_pick(l->env->wq);
	if (workq_io_add(l->env->wq, l->owner, l->tfd, &l->tio, EPOLLIN) != 0
	    || workq_io_add(l->env->wq, l->owner, l->lfd, &l->io, EPOLLIN) != 0) {
		snprintf(err, errlen, "%s: %s: epoll: %s", l->name, l->url, strerror(errno));
		return NNG_ENOMEM;
	}
	l->watching = true;
	return 0;
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

// ---------------------------------------------------------------------------
// Accepting

// A connection of listener arg has stopped reading for good (conn_set_tag
// hook): it no longer counts against max_connections.
static void conn_gone(void *arg)
{
	nmq_listener *l = arg;
	atomic_fetch_sub(&l->n_conns, 1);
}

// Hands a new connection of l to the upper layer: WebSocket on for ws and
// wss, tagged with l and counted. A connection that cannot be set up is
// released (closed).
static void adopt(nmq_listener *l, nmq_conn *c)
{
	if ((l->kind == KIND_WS || l->kind == KIND_WSS) && !conn_set_websocket(c, l->ws_path)) {
		conn_release(c);
		return;
	}
	atomic_fetch_add(&l->n_conns, 1);
	conn_set_tag(c, l, conn_gone);
	l->fn(l->arg, c);
}

// Posts the next accept, unless the listener is stopping. Called with
// l->mtx held.
static void accept_next(nmq_listener *l)
{
	if (!l->stopping) {
		l->sleeping = false;
		nng_stream_listener_accept(l->l, l->aio);
	}
}

// Accept completion (or the end of a backoff sleep): wrap the stream, tag
// it with the listener, pass it up, accept again. A cancelled accept (a
// TLS reload drops the connection NNG prepared with the old certificate)
// is simply posted again.
static void accept_cb(void *arg)
{
	nmq_listener *l  = arg;
	int           rv = nng_aio_result(l->aio);

	pthread_mutex_lock(&l->mtx);
	if (l->stopping || rv == NNG_ECLOSED) {
		pthread_mutex_unlock(&l->mtx);
		if (rv == 0) {
			// Accepted just as the listener stops: nobody will serve it.
			nng_stream_free(nng_aio_get_output(l->aio, 0));
		}
		return;
	}
	if (l->sleeping || rv == NNG_ECANCELED || rv == NNG_ETIMEDOUT) {
		accept_next(l);
		pthread_mutex_unlock(&l->mtx);
		return;
	}
	pthread_mutex_unlock(&l->mtx);

	if (rv == 0) {
		nng_stream *s = nng_aio_get_output(l->aio, 0);
		(void)nng_stream_set_bool(s, NNG_OPT_TCP_NODELAY, true);
		nmq_conn *c = conn_alloc(s, l->env);
		if (c == NULL) {
			nng_stream_free(s);
		} else {
			adopt(l, c);
		}
	}

	pthread_mutex_lock(&l->mtx);
	if (rv != 0) {
		// NNG already swallows the per-connection accept errors
		// (ECONNABORTED, ECONNRESET); what reaches us is running out of
		// descriptors or memory, where accepting again at once would
		// spin on the task threads that every client shares.
		if (!l->stopping) {
			l->sleeping = true;
			nng_sleep_aio(ACCEPT_BACKOFF_MS, l->aio);
		}
	} else {
		accept_next(l);
	}
	pthread_mutex_unlock(&l->mtx);
}

// Applies the options every kind of listener needs before listen. Returns
// 0 or an NNG error with a message in err.
static int listener_configure(nmq_listener *l, const listener_opts *o, char *err, size_t errlen)
{
	int rv;
	(void)nng_stream_listener_set_bool(l->l, NNG_OPT_TCP_NODELAY, true);
	if (l->kind == KIND_TLS || l->kind == KIND_WSS) {
		if ((rv = tls_config_build(o, &l->tls, err, errlen)) != 0) {
			return rv;
		}
		if ((rv = nng_stream_listener_set_ptr(l->l, NNG_OPT_TLS_CONFIG, l->tls)) != 0) {
			snprintf(err, errlen, "%s: %s: cannot apply the TLS configuration: %s",
			    l->name, l->url, nng_strerror(rv));
			return rv;
		}
		atomic_store(&l->verify_peer, o->verify_peer);
		atomic_store(&l->fail_if_no_peer_cert, o->verify_peer && o->fail_if_no_peer_cert);
	}
	return 0;
}

// Releases what a listener holds, but not the struct itself.
static void listener_release(nmq_listener *l)
{
	if (l->lfd >= 0) {
		close(l->lfd);
		l->lfd = -1;
	}
	if (l->tfd >= 0) {
		close(l->tfd);
		l->tfd = -1;
	}
	if (l->aio != NULL) {
		nng_aio_free(l->aio);
		l->aio = NULL;
	}
	if (l->l != NULL) {
		nng_stream_listener_free(l->l);
		l->l = NULL;
	}
	if (l->tls != NULL) {
		nng_tls_config_free(l->tls);
		l->tls = NULL;
	}
	if (l->tls_prev != NULL) {
		nng_tls_config_free(l->tls_prev);
		l->tls_prev = NULL;
	}
}

// Starts a listener; see listener.h.
int listener_start(nmq_listener **lp, const listener_opts *opts, const conn_env *env,
    listener_accept_fn fn, void *arg, char *err, size_t errlen)
{
	const char   *url  = opts->url != NULL ? opts->url : "";
	const char   *name = opts->name != NULL ? opts->name : url;
	int           kind = url_kind(url);
	nmq_listener *l;
	int           rv;

	if (kind < 0) {
		snprintf(err, errlen, "%s: %s: unsupported scheme", name, url);
		return NNG_EADDRINVAL;
	}
	if ((l = calloc(1, sizeof(*l))) == NULL) {
		snprintf(err, errlen, "%s: out of memory", name);
		return NNG_ENOMEM;
	}
	pthread_mutex_init(&l->mtx, NULL);
	snprintf(l->name, sizeof(l->name), "%s", name);
	snprintf(l->url, sizeof(l->url), "%s", url);
	l->kind = (enum listener_kind)kind;
	l->env  = env;
	l->fn   = fn;
	l->arg  = arg;
	atomic_init(&l->max_conns, opts->max_connections);
	atomic_init(&l->n_conns, 0);
	atomic_init(&l->verify_peer, false);
	atomic_init(&l->fail_if_no_peer_cert, false);

	l->lfd = -1;
	l->tfd = -1;
	char host[256];
	char port[16];
	char nng_url[300];
	if (kind == KIND_WS || kind == KIND_WSS) {
		if (split_url(
		        url, host, sizeof(host), port, sizeof(port), l->ws_path, sizeof(l->ws_path))
		    != 0) {
			snprintf(err, errlen, "%s: %s: expected %s://host:port/path", name, url,
			    kind == KIND_WS ? "ws" : "wss");
			rv = NNG_EADDRINVAL;
			goto fail;
		}
	}
	if (kind == KIND_TCP || kind == KIND_WS) {
		if ((rv = raw_listen(l, err, errlen)) != 0) {
			goto fail;
		}
		*lp = l;
		return 0;
	}
	if (kind == KIND_WSS) {
		// TLS from NNG, WebSocket from conn.c.
		snprintf(nng_url, sizeof(nng_url),
		    strchr(host, ':') != NULL ? "tls+tcp://[%s]:%s" : "tls+tcp://%s:%s", host,
		    port);
		url = nng_url;
	}
	if ((rv = nng_stream_listener_alloc(&l->l, url)) != 0) {
		snprintf(err, errlen, "%s: %s: %s", name, url, nng_strerror(rv));
		goto fail;
	}
	if ((rv = listener_configure(l, opts, err, errlen)) != 0) {
		goto fail;
	}
	if ((rv = nng_aio_alloc(&l->aio, accept_cb, l)) != 0) {
		snprintf(err, errlen, "%s: %s: %s", name, url, nng_strerror(rv));
		goto fail;
	}
	if ((rv = nng_stream_listener_listen(l->l)) != 0) {
		snprintf(err, errlen, "%s: cannot listen on %s: %s", name, url, nng_strerror(rv));
		goto fail;
	}
	pthread_mutex_lock(&l->mtx);
	accept_next(l);
	pthread_mutex_unlock(&l->mtx);
	*lp = l;
	return 0;
fail:
	listener_release(l);
	pthread_mutex_destroy(&l->mtx);
	free(l);
	return rv;
}

// Returns the bound port; see listener.h.
int listener_port(nmq_listener *l)
{
	int port = 0;
	if (l->kind == KIND_TCP || l->kind == KIND_WS) {
		return l->port;
	}
	if (l->l == NULL || nng_stream_listener_get_int(l->l, NNG_OPT_TCP_BOUND_PORT, &port) != 0) {
		return 0;
	}
	return port;
}

// Returns the name; see listener.h.
const char *listener_name(nmq_listener *l)
{
	return l->name;
}

// Stops a listener and parks its struct; see listener.h.
void listener_stop(nmq_listener *l)
{
	if (l == NULL) {
		return;
	}
	pthread_mutex_lock(&l->mtx);
	l->stopping = true;
	pthread_mutex_unlock(&l->mtx);
	if (l->kind == KIND_TCP || l->kind == KIND_WS) {
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
	} else {
		nng_stream_listener_close(l->l);
	}
	if (l->aio != NULL) {
		nng_aio_stop(l->aio);
	}
	pthread_mutex_lock(&l->mtx);
	listener_release(l);
	pthread_mutex_unlock(&l->mtx);

	pthread_mutex_lock(&retired_lock);
	l->retired_next = retired;
	retired         = l;
	pthread_mutex_unlock(&retired_lock);
}

// Swaps in a new TLS configuration for new connections; see listener.h.
int listener_reload_tls(nmq_listener *l, const listener_opts *opts, char *err, size_t errlen)
{
	nng_tls_config *cfg;
	int             rv;

	if (l->kind != KIND_TLS && l->kind != KIND_WSS) {
		snprintf(err, errlen, "%s: not a TLS listener", l->name);
		return NNG_EINVAL;
	}
	listener_opts o = *opts;
	o.name          = l->name;
	if ((rv = tls_config_build(&o, &cfg, err, errlen)) != 0) {
		return rv;
	}
	pthread_mutex_lock(&l->mtx);
	if (l->stopping) {
		pthread_mutex_unlock(&l->mtx);
		nng_tls_config_free(cfg);
		snprintf(err, errlen, "%s: listener is stopped", l->name);
		return NNG_ECLOSED;
	}
	// NNG 1.5.2 swaps the pointer under its own lock and keeps a
	// reference; streams already accepted hold theirs.
	if ((rv = nng_stream_listener_set_ptr(l->l, NNG_OPT_TLS_CONFIG, cfg)) != 0) {
		pthread_mutex_unlock(&l->mtx);
		nng_tls_config_free(cfg);
		snprintf(err, errlen,
		    "%s: NNG refused the new TLS configuration (%s); needs restart", l->name,
		    nng_strerror(rv));
		return rv;
	}
	if (l->tls_prev != NULL) {
		nng_tls_config_free(l->tls_prev);
	}
	l->tls_prev = l->tls;
	l->tls      = cfg;
	atomic_store(&l->verify_peer, opts->verify_peer);
	atomic_store(&l->fail_if_no_peer_cert, opts->verify_peer && opts->fail_if_no_peer_cert);
	bool cancel = !l->sleeping;
	pthread_mutex_unlock(&l->mtx);
	// NNG's tls+tcp listener (under ssl and wss alike) binds the
	// configuration when the accept is posted: re-post it so the very
	// next client gets the new files.
	if (cancel) {
		nng_aio_cancel(l->aio);
	}
	return 0;
}

// Decides whether a TLS peer may CONNECT; see listener.h.
bool listener_conn_authorized(nmq_conn *c, char *cn, size_t cnlen)
{
	nmq_listener *l = conn_tag(c);
	tls_peer      p;

	if (cn != NULL && cnlen > 0) {
		cn[0] = '\0';
	}
	if (l == NULL || (l->kind != KIND_TLS && l->kind != KIND_WSS)) {
		return true;
	}
	bool verify = atomic_load(&l->verify_peer);
	bool demand = atomic_load(&l->fail_if_no_peer_cert);
	if (!tls_engine_peer(conn_stream(c), &p) || !p.handshake_done) {
		return !verify;
	}
	if (verify && p.cert_present && !p.verified) {
		return false;
	}
	if (demand && !p.cert_present) {
		return false;
	}
	if (p.verified && cn != NULL && strlen(p.cn) < cnlen) {
		memcpy(cn, p.cn, strlen(p.cn) + 1);
	}
	return true;
}

// Reads the TLS peer record of a connection; see listener.h.
bool listener_conn_peer(nmq_conn *c, tls_peer *p)
{
	return tls_engine_peer(conn_stream(c), p);
}

// Says whether c's listener is over its connection limit; see listener.h.
bool listener_conn_over_limit(nmq_conn *c)
{
	nmq_listener *l = conn_tag(c);
	if (l == NULL) {
		return false;
	}
	unsigned max = atomic_load(&l->max_conns);
	return max > 0 && atomic_load(&l->n_conns) > max;
}
