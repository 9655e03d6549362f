// Our mbed TLS engine for NNG; see tls_engine.h for why it exists.
//
// NNG owns the memory of both objects below (it allocates `size` bytes,
// zeroed, and calls init/fini). A connection object lives inside NNG's
// tls+tcp stream and holds a pointer to the configuration, which NNG keeps
// alive (the stream holds a reference on its nng_tls_config).
#include "nng/transport/tls_engine.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <nng/supplemental/tls/engine.h>
#include <nng/supplemental/tls/tls.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/version.h>
#include <mbedtls/x509_crl.h>
#include <mbedtls/x509_crt.h>

// One certificate + key pair given with own_cert (a server may have
// several, e.g. RSA and ECDSA).
typedef struct own_cert {
	mbedtls_x509_crt   crt;
	mbedtls_pk_context key;
	struct own_cert   *next;
} own_cert;

struct nng_tls_engine_config {
	mbedtls_ssl_config conf;
	mbedtls_x509_crt   ca;
	mbedtls_x509_crl   crl;
	bool               have_ca;
	bool               have_crl;
	own_cert          *certs;
	nng_tls_mode       mode;
	nng_tls_auth_mode  auth;
	char              *server_name; // client: expected peer name (and SNI)
};

struct nng_tls_engine_conn {
	void                  *tls; // NNG's handle for nng_tls_engine_send/recv
	nng_tls_engine_config *cfg;
	mbedtls_ssl_context    ssl;
	bool                   ready; // init has run: ssl may be used and freed
	int                    io_err; // NNG error of the last failed bio call
	bool                   checked; // OPTIONAL-mode client cert checked
	tls_peer               peer; // filled when the handshake completes
};

// The process-wide random generator. mbed TLS may or may not be built
// with its own locking, so calls go through rng_lock.
static mbedtls_entropy_context  rng_entropy;
static mbedtls_ctr_drbg_context rng_drbg;
static pthread_mutex_t          rng_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static int            engine_rv   = NNG_ENOTSUP;

// Set by tls_engine_peer around one synchronous option read, so that the
// engine's verified() callback (run on the same thread) can copy the
// connection's identity out.
static _Thread_local tls_peer *probe_out;
static _Thread_local bool      probe_found;

// Random bytes for mbed TLS. Returns 0 or an mbed TLS error.
static int rng_random(void *arg, unsigned char *buf, size_t len)
{
	(void)arg;
	pthread_mutex_lock(&rng_lock);
	int rv = mbedtls_ctr_drbg_random(&rng_drbg, buf, len);
	pthread_mutex_unlock(&rng_lock);
	return rv;
}

// Maps an NNG TLS version to mbed TLS's minor version number (TLS 1.x is
// major 3, minor x+1). Returns -1 for a version mbed TLS 2.28 cannot do.
static int minor_version(nng_tls_version v)
{
	switch (v) {
	case NNG_TLS_1_0:
		return MBEDTLS_SSL_MINOR_VERSION_1;
	case NNG_TLS_1_1:
		return MBEDTLS_SSL_MINOR_VERSION_2;
	case NNG_TLS_1_2:
		return MBEDTLS_SSL_MINOR_VERSION_3;
	default:
		return -1;
	}
}

// ---------------------------------------------------------------------------
// Configuration objects

// Prepares a configuration for a server or a client. Returns 0, or
// NNG_ENOMEM/NNG_ECRYPTO if mbed TLS cannot set up its defaults.
static int cfg_init(nng_tls_engine_config *cfg, nng_tls_mode mode)
{
	int endpoint = mode == NNG_TLS_MODE_SERVER ? MBEDTLS_SSL_IS_SERVER : MBEDTLS_SSL_IS_CLIENT;

	cfg->mode = mode;
	cfg->auth
	    = mode == NNG_TLS_MODE_SERVER ? NNG_TLS_AUTH_MODE_NONE : NNG_TLS_AUTH_MODE_REQUIRED;
	mbedtls_ssl_config_init(&cfg->conf);
	mbedtls_x509_crt_init(&cfg->ca);
	mbedtls_x509_crl_init(&cfg->crl);
	if (mbedtls_ssl_config_defaults(
	        &cfg->conf, endpoint, MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT)
	    != 0) {
		return NNG_ECRYPTO;
	}
	mbedtls_ssl_conf_rng(&cfg->conf, rng_random, NULL);
	mbedtls_ssl_conf_authmode(&cfg->conf,
	    mode == NNG_TLS_MODE_SERVER ? MBEDTLS_SSL_VERIFY_NONE : MBEDTLS_SSL_VERIFY_REQUIRED);
	mbedtls_ssl_conf_min_version(
	    &cfg->conf, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
	mbedtls_ssl_conf_max_version(
	    &cfg->conf, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
	mbedtls_ssl_conf_renegotiation(&cfg->conf, MBEDTLS_SSL_RENEGOTIATION_DISABLED);
	return 0;
}

// Frees everything a configuration owns; it is not used by any connection
// any more (NNG guarantees it by reference counting).
static void cfg_fini(nng_tls_engine_config *cfg)
{
	own_cert *oc;
	while ((oc = cfg->certs) != NULL) {
		cfg->certs = oc->next;
		mbedtls_x509_crt_free(&oc->crt);
		mbedtls_pk_free(&oc->key);
		free(oc);
	}
	mbedtls_ssl_config_free(&cfg->conf);
	mbedtls_x509_crt_free(&cfg->ca);
	mbedtls_x509_crl_free(&cfg->crl);
	free(cfg->server_name);
	cfg->server_name = NULL;
}

// Sets the name a client expects in the server certificate (and sends as
// SNI). Returns 0 or NNG_ENOMEM.
static int cfg_server(nng_tls_engine_config *cfg, const char *name)
{
	char *dup = NULL;
	if (name != NULL && (dup = strdup(name)) == NULL) {
		return NNG_ENOMEM;
	}
	free(cfg->server_name);
	cfg->server_name = dup;
	return 0;
}

// Sets who must prove an identity. For a server, OPTIONAL means "a client
// may send no certificate, but one that it sends must verify"; that last
// part is enforced in conn_handshake. Returns 0 or NNG_EINVAL.
static int cfg_auth(nng_tls_engine_config *cfg, nng_tls_auth_mode mode)
{
	int m;
	switch (mode) {
	case NNG_TLS_AUTH_MODE_NONE:
		m = MBEDTLS_SSL_VERIFY_NONE;
		break;
	case NNG_TLS_AUTH_MODE_OPTIONAL:
		m = MBEDTLS_SSL_VERIFY_OPTIONAL;
		break;
	case NNG_TLS_AUTH_MODE_REQUIRED:
		m = MBEDTLS_SSL_VERIFY_REQUIRED;
		break;
	default:
		return NNG_EINVAL;
	}
	cfg->auth = mode;
	mbedtls_ssl_conf_authmode(&cfg->conf, m);
	return 0;
}

// Adds the PEM certificates in ca (and the optional PEM CRL) as trust
// anchors. Returns 0, or NNG_EINVAL if nothing usable could be parsed.
// A bundle in which some certificates are not understood is accepted as
// long as one is.
static int cfg_ca_chain(nng_tls_engine_config *cfg, const char *ca, const char *crl)
{
	int rv = mbedtls_x509_crt_parse(&cfg->ca, (const unsigned char *)ca, strlen(ca) + 1);
	if (rv < 0 || cfg->ca.version == 0) {
		return NNG_EINVAL;
	}
	cfg->have_ca = true;
	if (crl != NULL) {
		if (mbedtls_x509_crl_parse(&cfg->crl, (const unsigned char *)crl, strlen(crl) + 1)
		    != 0) {
			return NNG_EINVAL;
		}
		cfg->have_crl = true;
	}
	mbedtls_ssl_conf_ca_chain(&cfg->conf, &cfg->ca, cfg->have_crl ? &cfg->crl : NULL);
	return 0;
}

// Adds our own certificate chain and private key (PEM; the key may be
// encrypted with pass). Returns 0; NNG_EINVAL if the certificate or the
// key cannot be parsed or do not belong together; NNG_EPERM if the key
// needs a password that is missing or wrong; NNG_ENOMEM.
static int cfg_own_cert(
    nng_tls_engine_config *cfg, const char *cert, const char *key, const char *pass)
{
	own_cert *oc = calloc(1, sizeof(*oc));
	int       rv;
	if (oc == NULL) {
		return NNG_ENOMEM;
	}
	mbedtls_x509_crt_init(&oc->crt);
	mbedtls_pk_init(&oc->key);
	rv = mbedtls_x509_crt_parse(&oc->crt, (const unsigned char *)cert, strlen(cert) + 1);
	if (rv != 0) {
		rv = NNG_EINVAL;
		goto fail;
	}
	rv = mbedtls_pk_parse_key(&oc->key, (const unsigned char *)key, strlen(key) + 1,
	    (const unsigned char *)pass, pass != NULL ? strlen(pass) : 0);
	if (rv == MBEDTLS_ERR_PK_PASSWORD_REQUIRED || rv == MBEDTLS_ERR_PK_PASSWORD_MISMATCH) {
		rv = NNG_EPERM;
		goto fail;
	}
	if (rv != 0 || mbedtls_pk_check_pair(&oc->crt.pk, &oc->key) != 0) {
		rv = NNG_EINVAL;
		goto fail;
	}
	if (mbedtls_ssl_conf_own_cert(&cfg->conf, &oc->crt, &oc->key) != 0) {
		rv = NNG_ENOMEM;
		goto fail;
	}
	oc->next   = cfg->certs;
	cfg->certs = oc;
	return 0;
fail:
	mbedtls_x509_crt_free(&oc->crt);
	mbedtls_pk_free(&oc->key);
	free(oc);
	return rv;
}

// Restricts the protocol versions. mbed TLS 2.28 stops at TLS 1.2, so a
// range that needs more is clamped. Returns 0, or NNG_ENOTSUP if no
// version of the range is available.
static int cfg_version(nng_tls_engine_config *cfg, nng_tls_version lo, nng_tls_version hi)
{
	int min = minor_version(lo);
	int max = minor_version(hi);
	if (lo > hi || min < 0) {
		return NNG_ENOTSUP;
	}
	if (max < 0) {
		max = MBEDTLS_SSL_MINOR_VERSION_3;
	}
	mbedtls_ssl_conf_min_version(&cfg->conf, MBEDTLS_SSL_MAJOR_VERSION_3, min);
	mbedtls_ssl_conf_max_version(&cfg->conf, MBEDTLS_SSL_MAJOR_VERSION_3, max);
	return 0;
}

// ---------------------------------------------------------------------------
// Connection objects

// Writes ciphertext to NNG's transport buffer. Returns the count written,
// MBEDTLS_ERR_SSL_WANT_WRITE when the buffer is full, or
// MBEDTLS_ERR_NET_SEND_FAILED (the NNG error is kept in io_err).
static int bio_send(void *arg, const unsigned char *buf, size_t len)
{
	nng_tls_engine_conn *ec = arg;
	size_t               n  = len > INT_MAX ? INT_MAX : len;
	int                  rv = nng_tls_engine_send(ec->tls, buf, &n);
	if (rv == 0) {
		return (int)n;
	}
	if (rv == NNG_EAGAIN) {
		return MBEDTLS_ERR_SSL_WANT_WRITE;
	}
	ec->io_err = rv;
	return MBEDTLS_ERR_NET_SEND_FAILED;
}

// Reads ciphertext from NNG's transport buffer. Returns the count read,
// MBEDTLS_ERR_SSL_WANT_READ when nothing is buffered yet, or
// MBEDTLS_ERR_NET_RECV_FAILED (the NNG error is kept in io_err).
static int bio_recv(void *arg, unsigned char *buf, size_t len)
{
	nng_tls_engine_conn *ec = arg;
	size_t               n  = len > INT_MAX ? INT_MAX : len;
	int                  rv = nng_tls_engine_recv(ec->tls, buf, &n);
	if (rv == 0) {
		return (int)n;
	}
	if (rv == NNG_EAGAIN) {
		return MBEDTLS_ERR_SSL_WANT_READ;
	}
	ec->io_err = rv;
	return MBEDTLS_ERR_NET_RECV_FAILED;
}

// Translates an mbed TLS failure into the NNG error the stream reports.
static int map_error(nng_tls_engine_conn *ec, int rv)
{
	switch (rv) {
	case MBEDTLS_ERR_SSL_WANT_READ:
	case MBEDTLS_ERR_SSL_WANT_WRITE:
		return NNG_EAGAIN;
	case MBEDTLS_ERR_NET_SEND_FAILED:
	case MBEDTLS_ERR_NET_RECV_FAILED:
		return ec->io_err != 0 ? ec->io_err : NNG_ECONNSHUT;
	case MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY:
		return NNG_ECONNSHUT;
	case MBEDTLS_ERR_X509_CERT_VERIFY_FAILED:
	case MBEDTLS_ERR_SSL_NO_CLIENT_CERTIFICATE:
	case MBEDTLS_ERR_SSL_PEER_VERIFY_FAILED:
		return NNG_EPEERAUTH;
	case MBEDTLS_ERR_SSL_ALLOC_FAILED:
		return NNG_ENOMEM;
	default:
		return NNG_ECRYPTO;
	}
}

// Copies the first common name of a certificate subject into out, if it is
// a text string type without control characters. Leaves out empty
// otherwise.
static void copy_cn(const mbedtls_x509_name *n, char *out, size_t outlen)
{
	out[0] = '\0';
	for (; n != NULL; n = n->next) {
		if (MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &n->oid) != 0) {
			continue;
		}
		if ((n->val.tag != MBEDTLS_ASN1_UTF8_STRING
		        && n->val.tag != MBEDTLS_ASN1_PRINTABLE_STRING
		        && n->val.tag != MBEDTLS_ASN1_IA5_STRING)
		    || n->val.len == 0 || n->val.len >= outlen) {
			return;
		}
		for (size_t i = 0; i < n->val.len; i++) {
			if (n->val.p[i] < 0x20 || n->val.p[i] == 0x7f) {
				return;
			}
		}
		memcpy(out, n->val.p, n->val.len);
		out[n->val.len] = '\0';
		return;
	}
}

// Records what the finished handshake tells about the peer.
static void record_peer(nng_tls_engine_conn *ec)
{
	const mbedtls_x509_crt *crt = mbedtls_ssl_get_peer_cert(&ec->ssl);
	ec->peer.handshake_done     = true;
	ec->peer.cert_present       = crt != NULL;
	ec->peer.verified           = crt != NULL && mbedtls_ssl_get_verify_result(&ec->ssl) == 0;
	if (crt != NULL) {
		copy_cn(&crt->subject, ec->peer.cn, sizeof(ec->peer.cn));
		if (mbedtls_x509_dn_gets(ec->peer.subject, sizeof(ec->peer.subject), &crt->subject)
		    < 0) {
			ec->peer.subject[0] = '\0';
		}
	}
}

// Sets up the TLS state of one connection. Returns 0, or NNG_ENOMEM.
static int conn_init(nng_tls_engine_conn *ec, void *tls, nng_tls_engine_config *cfg)
{
	ec->tls = tls;
	ec->cfg = cfg;
	mbedtls_ssl_init(&ec->ssl);
	ec->ready = true;
	if (mbedtls_ssl_setup(&ec->ssl, &cfg->conf) != 0) {
		return NNG_ENOMEM;
	}
	if (cfg->mode == NNG_TLS_MODE_CLIENT && cfg->server_name != NULL
	    && mbedtls_ssl_set_hostname(&ec->ssl, cfg->server_name) != 0) {
		return NNG_ENOMEM;
	}
	mbedtls_ssl_set_bio(&ec->ssl, ec, bio_send, bio_recv, NULL);
	return 0;
}

// Frees the TLS state of a connection nobody uses any more. NNG also calls
// this for a connection whose accept failed before init ran.
static void conn_fini(nng_tls_engine_conn *ec)
{
	if (ec->ready) {
		mbedtls_ssl_free(&ec->ssl);
		ec->ready = false;
	}
}

// Queues a close-notify alert (best effort; the stream closes anyway).
static void conn_close(nng_tls_engine_conn *ec)
{
	if (ec->ready) {
		(void)mbedtls_ssl_close_notify(&ec->ssl);
	}
}

// Runs the handshake as far as the buffered data allows. Returns 0 when it
// is complete, NNG_EAGAIN when it needs I/O, NNG_EPEERAUTH when the peer's
// certificate is missing (REQUIRED) or does not verify, or another NNG
// error.
static int conn_handshake(nng_tls_engine_conn *ec)
{
	bool optional_server
	    = ec->cfg->mode == NNG_TLS_MODE_SERVER && ec->cfg->auth == NNG_TLS_AUTH_MODE_OPTIONAL;
	while (ec->ssl.state != MBEDTLS_SSL_HANDSHAKE_OVER) {
		int rv = mbedtls_ssl_handshake_step(&ec->ssl);
		if (rv != 0) {
			return map_error(ec, rv);
		}
		// The client's Certificate message has been processed once the
		// state moves past it. In OPTIONAL mode mbed TLS carries on
		// with a certificate that failed; we refuse it here, before
		// our Finished message.
		if (optional_server && !ec->checked
		    && ec->ssl.state > MBEDTLS_SSL_CLIENT_CERTIFICATE) {
			// Mid-handshake the certificate is in the session
			// being negotiated (get_peer_cert reads the
			// established session, which does not exist yet).
			const mbedtls_ssl_session *sn = ec->ssl.session_negotiate;
			ec->checked                   = true;
			if (sn == NULL || (sn->peer_cert != NULL && sn->verify_result != 0)) {
				(void)mbedtls_ssl_send_alert_message(&ec->ssl,
				    MBEDTLS_SSL_ALERT_LEVEL_FATAL, MBEDTLS_SSL_ALERT_MSG_BAD_CERT);
				return NNG_EPEERAUTH;
			}
		}
	}
	record_peer(ec);
	return 0;
}

// Decrypts up to *lenp bytes into buf. Returns 0 with *lenp set, NNG_EAGAIN
// when more ciphertext is needed, NNG_ECONNSHUT at the peer's close, or
// another NNG error.
static int conn_recv(nng_tls_engine_conn *ec, uint8_t *buf, size_t *lenp)
{
	int rv = mbedtls_ssl_read(&ec->ssl, buf, *lenp);
	if (rv > 0) {
		*lenp = (size_t)rv;
		return 0;
	}
	return rv == 0 ? NNG_ECONNSHUT : map_error(ec, rv);
}

// Encrypts up to *lenp bytes from buf. Returns 0 with *lenp set to what was
// taken, NNG_EAGAIN when the transport buffer is full (NNG calls again
// with the same data, as mbed TLS requires), or another NNG error.
static int conn_send(nng_tls_engine_conn *ec, const uint8_t *buf, size_t *lenp)
{
	int rv = mbedtls_ssl_write(&ec->ssl, buf, *lenp);
	if (rv > 0) {
		*lenp = (size_t)rv;
		return 0;
	}
	return rv == 0 ? NNG_EAGAIN : map_error(ec, rv);
}

// Returns true when the handshake is over and the peer presented a
// certificate that verified. When tls_engine_peer is probing on this
// thread, also copies the peer record out.
static bool conn_verified(nng_tls_engine_conn *ec)
{
	if (probe_out != NULL) {
		*probe_out  = ec->peer;
		probe_found = true;
	}
	return ec->peer.handshake_done && ec->peer.verified;
}

static nng_tls_engine_config_ops config_ops = {
	.size     = sizeof(nng_tls_engine_config),
	.init     = cfg_init,
	.fini     = cfg_fini,
	.server   = cfg_server,
	.auth     = cfg_auth,
	.ca_chain = cfg_ca_chain,
	.own_cert = cfg_own_cert,
	.version  = cfg_version,
};

static nng_tls_engine_conn_ops conn_ops = {
	.size      = sizeof(nng_tls_engine_conn),
	.init      = conn_init,
	.fini      = conn_fini,
	.close     = conn_close,
	.handshake = conn_handshake,
	.recv      = conn_recv,
	.send      = conn_send,
	.verified  = conn_verified,
};

static const nng_tls_engine engine = {
	.version     = NNG_TLS_ENGINE_VERSION,
	.config_ops  = &config_ops,
	.conn_ops    = &conn_ops,
	.name        = "nmq-mbed",
	.description = "nanomq engine over mbed TLS " MBEDTLS_VERSION_STRING,
	.fips_mode   = false,
};

// Seeds the generator and registers the engine; run once.
static void engine_setup(void)
{
	static const char pers[] = "nanomq-tls";
	mbedtls_entropy_init(&rng_entropy);
	mbedtls_ctr_drbg_init(&rng_drbg);
	if (mbedtls_ctr_drbg_seed(&rng_drbg, mbedtls_entropy_func, &rng_entropy,
	        (const unsigned char *)pers, sizeof(pers) - 1)
	    != 0) {
		engine_rv = NNG_ECRYPTO;
		return;
	}
	// NNG's engine lock is only initialised with the library itself, so
	// make sure NNG is up before registering.
	if (strcmp(nng_tls_engine_name(), "none") == 0) {
		engine_rv = NNG_ENOTSUP;
		return;
	}
	engine_rv = nng_tls_engine_register(&engine);
}

// Registers the engine; see tls_engine.h.
int tls_engine_init(void)
{
	pthread_once(&engine_once, engine_setup);
	return engine_rv;
}

// Returns whether the engine is registered; see tls_engine.h.
bool tls_engine_ready(void)
{
	return engine_rv == 0;
}

// Reads the peer record of a stream through NNG's "verified" option; see
// tls_engine.h.
bool tls_engine_peer(nng_stream *s, tls_peer *p)
{
	bool v = false;
	memset(p, 0, sizeof(*p));
	if (s == NULL || !tls_engine_ready()) {
		return false;
	}
	probe_out   = p;
	probe_found = false;
	int rv      = nng_stream_get_bool(s, NNG_OPT_TLS_VERIFIED, &v);
	probe_out   = NULL;
	if (rv != 0 || !probe_found) {
		memset(p, 0, sizeof(*p));
		return false;
	}
	return true;
}
