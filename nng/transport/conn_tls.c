// TLS on our own event loops; see conn_tls.h and, for the functions the
// plain-socket backend calls, conn_int.h.
//
// Reads: mbed TLS 2.28 asks its input callback for exactly what it needs
// (a record's 5-byte header, then its body), which would be two read()
// calls per record. bio_recv reads ahead instead: a short request is
// served by one large read into the caller's room (a worker's scratch
// buffer, or the handshake thread's), the rest kept for the next requests
// of the same call; whatever is left when the call returns moves to a
// small heap buffer of the connection (ra_settle), so that nothing points
// into the caller's room afterwards. Bytes held there or inside mbed TLS
// are not seen by epoll: conn_tls_pending says when the owner must read
// again without waiting for readiness.
//
// Writes: the queued segments are gathered into records of up to the
// maximum payload (16 KiB) through a per-thread staging buffer, so that a
// batch of small MQTT packets costs one record and one send(). When the
// socket is full mbed TLS keeps the encrypted record (out_left) and the
// bytes count as taken; the next call flushes it before anything new.
// mbed TLS would report a new write as done after flushing an old record
// without writing the new one, so a flush always comes first.
#include "nng/transport/conn_tls.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>

#include "nng/core/log.h"
#include "nng/transport/conn_int.h"

#define TLS_RA_DIRECT 4096 // requests this large read straight into mbed TLS
#define TLS_STAGE     (16 * 1024) // the largest record payload

struct conn_tls {
	mbedtls_ssl_context ssl;
	tls_engine_direct  *cfg; // one reference
	int                 fd;
	// Read-ahead (see the top of this file).
	uint8_t       *ra_buf; // this call's room, NULL outside a call
	size_t         ra_bufsz;
	const uint8_t *ra; // next unread byte
	size_t         ra_len;
	uint8_t       *ra_heap; // the rest kept between calls
	bool           ra_in_heap; // ra points into ra_heap
	bool           rd_short; // the last read-ahead got less than its room
	bool           checked; // OPTIONAL-mode client certificate checked
	bool           failed; // a fatal error was seen: no more I/O
	size_t         max_out; // largest record payload
	tls_peer       peer;
	tls_engine_ip  ip; // a client's: the server address to find in its certificate
};

// The calling thread's staging buffer for gathering records, freed when
// the thread exits.
static pthread_key_t     stage_key;
static pthread_once_t    stage_once = PTHREAD_ONCE_INIT;
static bool              stage_ok;
static __thread uint8_t *stage;
static void              stage_key_make(void)
{
	stage_ok = pthread_key_create(&stage_key, free) == 0;
}

// Returns the thread's staging buffer (TLS_STAGE bytes), or NULL.
static uint8_t *stage_get(void)
{
	if (stage != NULL) {
		return stage;
	}
	pthread_once(&stage_once, stage_key_make);
	if (!stage_ok || (stage = malloc(TLS_STAGE)) == NULL) {
		return NULL;
	}
	if (pthread_setspecific(stage_key, stage) != 0) {
		free(stage);
		stage = NULL;
	}
	return stage;
}

// Input callback of mbed TLS: serves the read-ahead, else reads (ahead
// into ra_buf for a short request). Returns bytes, 0 at the peer's end of
// stream, MBEDTLS_ERR_SSL_WANT_READ or MBEDTLS_ERR_NET_RECV_FAILED.
static int bio_recv(void *arg, unsigned char *buf, size_t len)
{
	conn_tls *t = arg;
	if (t->ra_len > 0) {
		size_t n = len < t->ra_len ? len : t->ra_len;
		memcpy(buf, t->ra, n);
		t->ra += n;
		t->ra_len -= n;
		return (int)n;
	}
	bool     ahead = len < TLS_RA_DIRECT && t->ra_buf != NULL;
	uint8_t *dst   = ahead ? t->ra_buf : buf;
	size_t   room  = ahead ? t->ra_bufsz : len;
	ssize_t  n;
	do {
		n = read(t->fd, dst, room);
	} while (n < 0 && errno == EINTR);
	if (n < 0) {
		return errno == EAGAIN || errno == EWOULDBLOCK ? MBEDTLS_ERR_SSL_WANT_READ
		                                               : MBEDTLS_ERR_NET_RECV_FAILED;
	}
	if (n == 0) {
		return 0;
	}
	conn_count_rx((size_t)n);
	// A short read-ahead most likely emptied the socket; a direct read
	// of a record body says nothing about it.
	t->rd_short = ahead && (size_t)n < room;
	if (!ahead) {
		return (int)n;
	}
	size_t k = (size_t)n < len ? (size_t)n : len;
	memcpy(buf, dst, k);
	t->ra         = dst + k;
	t->ra_len     = (size_t)n - k;
	t->ra_in_heap = false;
	return (int)k;
}

// Output callback of mbed TLS. Returns bytes, MBEDTLS_ERR_SSL_WANT_WRITE
// or MBEDTLS_ERR_NET_SEND_FAILED.
static int bio_send(void *arg, const unsigned char *buf, size_t len)
{
	conn_tls *t = arg;
	ssize_t   n;
	do {
		n = send(t->fd, buf, len, MSG_NOSIGNAL);
	} while (n < 0 && errno == EINTR);
	if (n < 0) {
		return errno == EAGAIN || errno == EWOULDBLOCK ? MBEDTLS_ERR_SSL_WANT_WRITE
		                                               : MBEDTLS_ERR_NET_SEND_FAILED;
	}
	conn_count_tx((size_t)n);
	return (int)n;
}

// Ends a call that lent ra_buf: a read-ahead rest moves to the heap.
static void ra_settle(conn_tls *t)
{
	t->ra_buf = NULL;
	if (t->ra_in_heap) {
		if (t->ra_len == 0) {
			free(t->ra_heap);
			t->ra_heap    = NULL;
			t->ra         = NULL;
			t->ra_in_heap = false;
		}
		return;
	}
	free(t->ra_heap);
	t->ra_heap = NULL;
	if (t->ra_len == 0) {
		t->ra = NULL;
		return;
	}
	uint8_t *h = malloc(t->ra_len);
	if (h == NULL) {
		log_warn_rl("conn", "event=tls_failed reason=\"out of memory for input\"");
		t->failed = true;
		t->ra_len = 0;
		t->ra     = NULL;
		return;
	}
	memcpy(h, t->ra, t->ra_len);
	t->ra_heap    = h;
	t->ra         = h;
	t->ra_in_heap = true;
}

conn_tls *conn_tls_new(int fd, tls_engine_direct *cfg)
{
	conn_tls *t = calloc(1, sizeof(*t));
	if (t == NULL) {
		return NULL;
	}
	mbedtls_ssl_init(&t->ssl);
	if (mbedtls_ssl_setup(&t->ssl, tls_engine_direct_conf(cfg)) != 0) {
		mbedtls_ssl_free(&t->ssl);
		free(t);
		return NULL;
	}
	tls_engine_direct_hold(cfg);
	t->cfg = cfg;
	t->fd  = fd;
	mbedtls_ssl_set_bio(&t->ssl, t, bio_send, bio_recv, NULL);
	return t;
}

conn_tls *conn_tls_new_client(int fd, tls_engine_direct *cfg, const char *server_name)
{
	conn_tls *t = conn_tls_new(fd, cfg);
	if (t != NULL && tls_engine_client_name(&t->ssl, server_name, &t->ip) != 0) {
		conn_tls_free(t);
		return NULL;
	}
	return t;
}

void conn_tls_free(conn_tls *t)
{
	if (t == NULL) {
		return;
	}
	mbedtls_ssl_free(&t->ssl);
	tls_engine_direct_free(t->cfg);
	free(t->ra_heap);
	free(t);
}

int conn_tls_handshake(conn_tls *t, uint8_t *buf, size_t bufsz, char *why, size_t whylen)
{
	t->ra_buf   = buf;
	t->ra_bufsz = bufsz;
	int rv      = tls_engine_handshake(&t->ssl, t->cfg, &t->checked, &t->peer);
	ra_settle(t);
	if (rv == 0 && !t->failed) {
		int m      = mbedtls_ssl_get_max_out_record_payload(&t->ssl);
		t->max_out = m > 0 && m < TLS_STAGE ? (size_t)m : TLS_STAGE;
		return CONN_TLS_DONE;
	}
	if (rv == MBEDTLS_ERR_SSL_WANT_READ) {
		return CONN_TLS_WANT_READ;
	}
	if (rv == MBEDTLS_ERR_SSL_WANT_WRITE) {
		return CONN_TLS_WANT_WRITE;
	}
	if (rv != 0) {
		tls_engine_handshake_why(&t->ssl, &t->ip, rv, why, whylen);
	} else {
		snprintf(why, whylen, "out of memory");
	}
	return CONN_TLS_FAILED;
}

// Decrypts into buf; see conn_int.h.
ssize_t conn_tls_recv(
    conn_tls *t, nmq_mutex *mtx, uint8_t *buf, size_t len, uint8_t *ra, size_t rasz)
{
	size_t got = 0;
	int    rv  = 0;
	nmq_mutex_lock(mtx);
	if (t->failed) {
		nmq_mutex_unlock(mtx);
		errno = EPROTO;
		return -1;
	}
	t->ra_buf   = ra;
	t->ra_bufsz = rasz;
	t->rd_short = false;
	while (got < len) {
		rv = mbedtls_ssl_read(&t->ssl, buf + got, len - got);
		if (rv <= 0) {
			break;
		}
		got += (size_t)rv;
		if (t->rd_short && t->ra_len == 0 && mbedtls_ssl_get_bytes_avail(&t->ssl) == 0
		    && !mbedtls_ssl_check_pending(&t->ssl)) {
			break; // the socket is most likely empty: spare a read
		}
	}
	ra_settle(t);
	bool fatal = rv < 0 && rv != MBEDTLS_ERR_SSL_WANT_READ && rv != MBEDTLS_ERR_SSL_WANT_WRITE;
	if (fatal && got > 0) {
		// Hand up what came before the error; the next call fails.
		t->failed = true;
	}
	nmq_mutex_unlock(mtx);
	if (got > 0) {
		return (ssize_t)got;
	}
	if (rv == MBEDTLS_ERR_SSL_WANT_READ || rv == MBEDTLS_ERR_SSL_WANT_WRITE) {
		errno = EAGAIN;
		return -1;
	}
	if (rv == 0 || rv == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY || rv == MBEDTLS_ERR_SSL_CONN_EOF) {
		return 0;
	}
	char why[96];
	mbedtls_strerror(rv, why, sizeof(why));
	log_debug("conn", "event=tls_failed reason=\"%s\"", why);
	errno = EPROTO;
	return -1;
}

// Encrypts and sends from iov; see conn_int.h.
int conn_tls_send(conn_tls *t, const struct iovec *iov, int n, size_t *consumed)
{
	*consumed = 0;
	if (t->failed) {
		return EPIPE;
	}
	if (t->ssl.out_left > 0) {
		int rv = mbedtls_ssl_write(&t->ssl, NULL, 0);
		if (rv == MBEDTLS_ERR_SSL_WANT_WRITE) {
			return EAGAIN;
		}
		if (rv < 0) {
			t->failed = true;
			return EPIPE;
		}
	}
	if (n == 0) {
		return 0;
	}
	const uint8_t *p   = iov[0].iov_base;
	size_t         len = iov[0].iov_len;
	uint8_t       *st;
	if (n > 1 && len < t->max_out && (st = stage_get()) != NULL) {
		len = 0;
		for (int i = 0; i < n && len < t->max_out; i++) {
			size_t k = iov[i].iov_len;
			if (k > t->max_out - len) {
				k = t->max_out - len;
			}
			memcpy(st + len, iov[i].iov_base, k);
			len += k;
		}
		p = st;
	} else if (len > t->max_out) {
		len = t->max_out;
	}
	int rv = mbedtls_ssl_write(&t->ssl, p, len);
	if (rv > 0) {
		*consumed = (size_t)rv;
		return 0;
	}
	if (rv == MBEDTLS_ERR_SSL_WANT_WRITE && t->ssl.out_left > 0) {
		// Encrypted and kept by mbed TLS: taken; the next call flushes.
		*consumed = len;
		return 0;
	}
	t->failed = true;
	return EPIPE;
}

bool conn_tls_unflushed(const conn_tls *t)
{
	return t->ssl.out_left > 0;
}

bool conn_tls_pending(const conn_tls *t)
{
	return !t->failed
	    && (t->ra_len > 0 || mbedtls_ssl_get_bytes_avail(&t->ssl) > 0
	        || mbedtls_ssl_check_pending(&t->ssl));
}

void conn_tls_close_notify(conn_tls *t)
{
	if (!t->failed && t->ssl.out_left == 0 && t->ssl.state == MBEDTLS_SSL_HANDSHAKE_OVER) {
		(void)mbedtls_ssl_close_notify(&t->ssl);
	}
}

void conn_tls_peer_of(const conn_tls *t, tls_peer *p)
{
	*p = t->peer;
}

const tls_peer *conn_tls_peer_at(const conn_tls *t)
{
	return &t->peer;
}
