// TLS client connections on mbed TLS; see cli_tls.h.
#include "tools/nanomq_cli/cli_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

// Debian's bundle of public CAs, used when no --cafile is given.
#define SYSTEM_CA_BUNDLE "/etc/ssl/certs/ca-certificates.crt"

struct cli_tls {
	mbedtls_ssl_config       conf;
	mbedtls_x509_crt         ca;
	mbedtls_x509_crt         cert;
	mbedtls_pk_context       key;
	mbedtls_entropy_context  entropy;
	mbedtls_ctr_drbg_context drbg;
	pthread_mutex_t          lock; // drbg, session, have_session
	char                    *server_name; // DNS name to check, or NULL
	uint8_t                  ip[16]; // or the IP address the host was given as
	size_t                   ip_len; // 4, 16, or 0
	bool                     resume;
	bool                     have_session;
	mbedtls_ssl_session      session; // the last full handshake's
	atomic_uint_fast64_t     full;
	atomic_uint_fast64_t     resumed;
};

struct cli_tls_conn {
	cli_tls            *t;
	bool                resumed; // the handshake resumed the kept session
	mbedtls_ssl_context ssl;
	int                 fd;
	int                 err; // errno of the last failed socket call
	size_t              pending; // length of a write mbed TLS half sent
};

// Random bytes under the shared lock. Returns 0 or an mbed TLS error.
static int rng(void *arg, unsigned char *buf, size_t len)
{
	cli_tls *t = arg;
	pthread_mutex_lock(&t->lock);
	int rv = mbedtls_ctr_drbg_random(&t->drbg, buf, len);
	pthread_mutex_unlock(&t->lock);
	return rv;
}

// Certificate check for a server given by IP address (mbed TLS 2.28 only
// matches DNS names): the end certificate must list the address as an
// iPAddress subject alternative name. Returns 0 (flags say the verdict).
static int verify_ip(void *arg, mbedtls_x509_crt *crt, int depth, uint32_t *flags)
{
	cli_tls *t = arg;
	if (depth != 0) {
		return 0;
	}
	for (const mbedtls_x509_sequence *s = &crt->subject_alt_names; s != NULL; s = s->next) {
		if (s->buf.tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | 7) && s->buf.len == t->ip_len
		    && memcmp(s->buf.p, t->ip, t->ip_len) == 0) {
			return 0;
		}
	}
	*flags |= MBEDTLS_X509_BADCERT_CN_MISMATCH;
	return 0;
}

// Formats an mbed TLS error as text into why.
static void reason(int rv, char *why, size_t whylen)
{
	char buf[160];
	mbedtls_strerror(rv, buf, sizeof(buf));
	snprintf(why, whylen, "%s (-0x%04x)", buf[0] ? buf : "mbed TLS error", (unsigned)-rv);
}

// Loads the files and prepares the client configuration; see cli_tls.h.
int cli_tls_new(cli_tls **tp, const cli_tls_opts *o, char *err, size_t errlen)
{
	static const char pers[] = "nanomq_cli";
	char              why[200];
	int               rv;
	cli_tls          *t = calloc(1, sizeof(*t));

	if (t == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	pthread_mutex_init(&t->lock, NULL);
	mbedtls_ssl_config_init(&t->conf);
	mbedtls_x509_crt_init(&t->ca);
	mbedtls_x509_crt_init(&t->cert);
	mbedtls_pk_init(&t->key);
	mbedtls_entropy_init(&t->entropy);
	mbedtls_ctr_drbg_init(&t->drbg);
	mbedtls_ssl_session_init(&t->session);
	t->resume = o->resume;
	if (o->server_name != NULL && inet_pton(AF_INET, o->server_name, t->ip) == 1) {
		t->ip_len = 4;
	} else if (o->server_name != NULL && inet_pton(AF_INET6, o->server_name, t->ip) == 1) {
		t->ip_len = 16;
	} else if (o->server_name != NULL && (t->server_name = strdup(o->server_name)) == NULL) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	if ((rv = mbedtls_ctr_drbg_seed(&t->drbg, mbedtls_entropy_func, &t->entropy,
	         (const unsigned char *)pers, sizeof(pers) - 1))
	    != 0) {
		reason(rv, why, sizeof(why));
		snprintf(err, errlen, "cannot seed the random generator: %s", why);
		goto fail;
	}
	if ((rv = mbedtls_ssl_config_defaults(&t->conf, MBEDTLS_SSL_IS_CLIENT,
	         MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT))
	    != 0) {
		reason(rv, why, sizeof(why));
		snprintf(err, errlen, "TLS setup: %s", why);
		goto fail;
	}
	mbedtls_ssl_conf_rng(&t->conf, rng, t);
	mbedtls_ssl_conf_min_version(
	    &t->conf, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
	mbedtls_ssl_conf_session_tickets(&t->conf, MBEDTLS_SSL_SESSION_TICKETS_ENABLED);
	const char *ca = o->cafile;
	if (ca == NULL && !o->insecure && access(SYSTEM_CA_BUNDLE, R_OK) == 0) {
		ca = SYSTEM_CA_BUNDLE;
	}
	if (ca != NULL) {
		rv = mbedtls_x509_crt_parse_file(&t->ca, ca);
		if (rv < 0 || t->ca.version == 0) {
			reason(rv, why, sizeof(why));
			snprintf(err, errlen, "--cafile %s: %s", ca, why);
			goto fail;
		}
		mbedtls_ssl_conf_ca_chain(&t->conf, &t->ca, NULL);
	} else if (!o->insecure) {
		snprintf(err, errlen,
		    "TLS needs --cafile (no system CA bundle at " SYSTEM_CA_BUNDLE
		    "), or --insecure to skip verifying the server");
		goto fail;
	}
	mbedtls_ssl_conf_authmode(
	    &t->conf, o->insecure ? MBEDTLS_SSL_VERIFY_NONE : MBEDTLS_SSL_VERIFY_REQUIRED);
	if (t->ip_len > 0 && !o->insecure) {
		mbedtls_ssl_conf_verify(&t->conf, verify_ip, t);
	}
	if ((o->certfile == NULL) != (o->keyfile == NULL)) {
		snprintf(
		    err, errlen, "a client certificate needs both a certificate and a key file");
		goto fail;
	}
	if (o->certfile != NULL) {
		if ((rv = mbedtls_x509_crt_parse_file(&t->cert, o->certfile)) != 0) {
			reason(rv, why, sizeof(why));
			snprintf(err, errlen, "certificate %s: %s", o->certfile, why);
			goto fail;
		}
		if ((rv = mbedtls_pk_parse_keyfile(&t->key, o->keyfile, o->keypass)) != 0) {
			reason(rv, why, sizeof(why));
			snprintf(err, errlen, "key %s: %s", o->keyfile, why);
			goto fail;
		}
		if ((rv = mbedtls_ssl_conf_own_cert(&t->conf, &t->cert, &t->key)) != 0) {
			reason(rv, why, sizeof(why));
			snprintf(err, errlen, "certificate %s: %s", o->certfile, why);
			goto fail;
		}
	}
	*tp = t;
	return 0;
fail:
	cli_tls_free(t);
	return -1;
}

// Frees t; see cli_tls.h.
void cli_tls_free(cli_tls *t)
{
	if (t == NULL) {
		return;
	}
	mbedtls_ssl_session_free(&t->session);
	mbedtls_ssl_config_free(&t->conf);
	mbedtls_x509_crt_free(&t->ca);
	mbedtls_x509_crt_free(&t->cert);
	mbedtls_pk_free(&t->key);
	mbedtls_ctr_drbg_free(&t->drbg);
	mbedtls_entropy_free(&t->entropy);
	pthread_mutex_destroy(&t->lock);
	free(t->server_name);
	free(t);
}

// Reports the handshake counts; see cli_tls.h.
void cli_tls_counts(cli_tls *t, uint64_t *full, uint64_t *resumed)
{
	*full    = t != NULL ? atomic_load(&t->full) : 0;
	*resumed = t != NULL ? atomic_load(&t->resumed) : 0;
}

// Sends ciphertext on the socket. Returns the count, WANT_WRITE, or
// NET_SEND_FAILED (errno kept).
static int bio_send(void *arg, const unsigned char *buf, size_t len)
{
	cli_tls_conn *c = arg;
	for (;;) {
		ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);
		if (n >= 0) {
			return (int)n;
		}
		if (errno == EINTR) {
			continue;
		}
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			return MBEDTLS_ERR_SSL_WANT_WRITE;
		}
		c->err = errno;
		return MBEDTLS_ERR_NET_SEND_FAILED;
	}
}

// Reads ciphertext from the socket. Returns the count, 0 at the end,
// WANT_READ, or NET_RECV_FAILED (errno kept).
static int bio_recv(void *arg, unsigned char *buf, size_t len)
{
	cli_tls_conn *c = arg;
	for (;;) {
		ssize_t n = recv(c->fd, buf, len, 0);
		if (n >= 0) {
			return (int)n;
		}
		if (errno == EINTR) {
			continue;
		}
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			return MBEDTLS_ERR_SSL_WANT_READ;
		}
		c->err = errno;
		return MBEDTLS_ERR_NET_RECV_FAILED;
	}
}

// Starts TLS on fd; see cli_tls.h.
int cli_tls_conn_new(cli_tls_conn **cp, cli_tls *t, int fd)
{
	cli_tls_conn *c = calloc(1, sizeof(*c));
	if (c == NULL) {
		return -1;
	}
	c->t  = t;
	c->fd = fd;
	mbedtls_ssl_init(&c->ssl);
	if (mbedtls_ssl_setup(&c->ssl, &t->conf) != 0
	    || (t->server_name != NULL && mbedtls_ssl_set_hostname(&c->ssl, t->server_name) != 0)) {
		cli_tls_conn_free(c);
		return -1;
	}
	mbedtls_ssl_set_bio(&c->ssl, c, bio_send, bio_recv, NULL);
	if (t->resume) {
		pthread_mutex_lock(&t->lock);
		if (t->have_session) {
			(void)mbedtls_ssl_set_session(&c->ssl, &t->session);
		}
		pthread_mutex_unlock(&t->lock);
	}
	*cp = c;
	return 0;
}

// Frees c; see cli_tls.h.
void cli_tls_conn_free(cli_tls_conn *c)
{
	if (c != NULL) {
		mbedtls_ssl_free(&c->ssl);
		free(c);
	}
}

// Advances the handshake; see cli_tls.h.
int cli_tls_handshake(cli_tls_conn *c, char *why, size_t whylen)
{
	int rv = mbedtls_ssl_handshake(&c->ssl);
	if (rv == MBEDTLS_ERR_SSL_WANT_READ) {
		return CLI_TLS_WANT_READ;
	}
	if (rv == MBEDTLS_ERR_SSL_WANT_WRITE) {
		return CLI_TLS_WANT_WRITE;
	}
	if (rv != 0) {
		uint32_t flags = mbedtls_ssl_get_verify_result(&c->ssl);
		if (rv == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED && flags != 0
		    && flags != (uint32_t)-1) {
			char info[200];
			mbedtls_x509_crt_verify_info(info, sizeof(info), "", flags);
			info[strcspn(info, "\n")] = '\0';
			snprintf(why, whylen, "TLS: server certificate not trusted: %s", info);
		} else if (rv == MBEDTLS_ERR_NET_SEND_FAILED || rv == MBEDTLS_ERR_NET_RECV_FAILED) {
			snprintf(why, whylen, "TLS handshake: %s", strerror(c->err ? c->err : EIO));
		} else {
			char r[200];
			reason(rv, r, sizeof(r));
			snprintf(why, whylen, "TLS handshake: %s", r);
		}
		return CLI_TLS_FAILED;
	}
	cli_tls *t = c->t;
	// mbed TLS 2.28 has no "was this resumed" call once the handshake is
	// over; a resumed session carries the master secret of the one that
	// was offered, a full handshake makes a new one.
	bool resumed = false;
	if (t->resume) {
		pthread_mutex_lock(&t->lock);
		const mbedtls_ssl_session *s = c->ssl.session;
		resumed                      = t->have_session && s != NULL
		    && memcmp(s->master, t->session.master, sizeof(s->master)) == 0;
		if (!resumed) {
			mbedtls_ssl_session_free(&t->session);
			mbedtls_ssl_session_init(&t->session);
			t->have_session = mbedtls_ssl_get_session(&c->ssl, &t->session) == 0;
		}
		pthread_mutex_unlock(&t->lock);
	}
	c->resumed = resumed;
	atomic_fetch_add(resumed ? &t->resumed : &t->full, 1);
	return CLI_TLS_DONE;
}

// Maps a failed mbed TLS read or write to errno and why. Returns -1.
static ssize_t io_fail(cli_tls_conn *c, int rv, char *why, size_t whylen)
{
	if (rv == MBEDTLS_ERR_SSL_WANT_READ || rv == MBEDTLS_ERR_SSL_WANT_WRITE) {
		errno = EAGAIN;
		return -1;
	}
	if (rv == MBEDTLS_ERR_NET_SEND_FAILED || rv == MBEDTLS_ERR_NET_RECV_FAILED) {
		snprintf(why, whylen, "%s", strerror(c->err ? c->err : EIO));
	} else {
		reason(rv, why, whylen);
	}
	errno = EIO;
	return -1;
}

// Encrypts and sends; see cli_tls.h.
ssize_t cli_tls_send(cli_tls_conn *c, const void *buf, size_t len, char *why, size_t whylen)
{
	// After WANT_WRITE, mbed TLS must be called with the same length: the
	// record is already built and its length is what it will report.
	if (c->pending > 0 && len >= c->pending) {
		len = c->pending;
	}
	int rv = mbedtls_ssl_write(&c->ssl, buf, len);
	if (rv > 0) {
		c->pending = 0;
		return rv;
	}
	if (rv == MBEDTLS_ERR_SSL_WANT_WRITE && c->pending == 0) {
		size_t max = (size_t)mbedtls_ssl_get_max_out_record_payload(&c->ssl);
		c->pending = len < max ? len : max;
	}
	return io_fail(c, rv, why, whylen);
}

// Receives and decrypts; see cli_tls.h.
ssize_t cli_tls_recv(cli_tls_conn *c, void *buf, size_t len, char *why, size_t whylen)
{
	int rv = mbedtls_ssl_read(&c->ssl, buf, len);
	if (rv > 0) {
		return rv;
	}
	if (rv == 0 || rv == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY) {
		return 0;
	}
	return io_fail(c, rv, why, whylen);
}

// Makes one full handshake and keeps its session; see cli_tls.h.
int cli_tls_prime(cli_tls *t, const struct sockaddr *addr, socklen_t addrlen, int timeout_ms,
    char *err, size_t errlen)
{
	struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
	cli_tls_conn  *c  = NULL;
	char           why[256];
	int            rv = -1;
	int            fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, addr, addrlen) != 0) {
		snprintf(err, errlen, "connect: %s", strerror(errno));
		goto out;
	}
	if (cli_tls_conn_new(&c, t, fd) != 0) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	int hs = cli_tls_handshake(c, why, sizeof(why));
	if (hs != CLI_TLS_DONE) {
		snprintf(err, errlen, "%s", hs == CLI_TLS_FAILED ? why : "TLS handshake: timeout");
		goto out;
	}
	atomic_fetch_sub(&t->full, 1); // the priming handshake is not the run's
	cli_tls_close_notify(c);
	rv = 0;
out:
	cli_tls_conn_free(c);
	close(fd);
	return rv;
}

// Returns the decrypted bytes waiting; see cli_tls.h.
size_t cli_tls_pending(cli_tls_conn *c)
{
	return mbedtls_ssl_get_bytes_avail(&c->ssl);
}

// Describes the session; see cli_tls.h.
void cli_tls_describe(cli_tls_conn *c, char *buf, size_t len)
{
	buf[0] = '\0';
	if (c == NULL || c->ssl.state != MBEDTLS_SSL_HANDSHAKE_OVER) {
		return;
	}
	snprintf(buf, len, "%s %s%s", mbedtls_ssl_get_version(&c->ssl),
	    mbedtls_ssl_get_ciphersuite(&c->ssl), c->resumed ? ", resumed" : "");
}

// Queues close_notify; see cli_tls.h.
void cli_tls_close_notify(cli_tls_conn *c)
{
	(void)mbedtls_ssl_close_notify(&c->ssl);
}
