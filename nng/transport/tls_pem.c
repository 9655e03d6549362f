// PEM files for the TLS engine; see tls_pem.h.
//
// Files are read whole (at most PEM_MAX bytes) into heap buffers and
// parsed with mbed TLS before the engine sees them, so that every failure names
// its file; key material is wiped before it is freed.
#include "nng/transport/tls_pem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mbedtls/error.h>
#include <mbedtls/pk.h>
#include <mbedtls/pkcs5.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/x509_crt.h>

#include "nng/transport/tls_engine.h"
#include "nng/transport/transport_err.h"

// Largest PEM file we read (a CA bundle is ~200 KB).
#define PEM_MAX (4u << 20)

// Formats an mbed TLS error code as text.
static void mbed_reason(int rv, char *buf, size_t len)
{
	mbedtls_strerror(rv, buf, len);
	if (buf[0] == '\0') {
		snprintf(buf, len, "mbed TLS error -0x%04x", (unsigned)-rv);
	}
}

// Reads a whole PEM file into a NUL-terminated heap buffer. Returns NMQ_OK,
// or an error with "<name>: <key> <path>: <reason>" in err.
static nmq_err pem_read(const char *name, const char *key, const char *path, char **out,
    size_t *outlen, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long  n;
	if (f == NULL) {
		snprintf(
		    err, errlen, "%s: %s %s: cannot open: %s", name, key, path, strerror(errno));
		return NMQ_ENOENT;
	}
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
		snprintf(
		    err, errlen, "%s: %s %s: cannot read: %s", name, key, path, strerror(errno));
		fclose(f);
		return NMQ_EINVAL;
	}
	if ((unsigned long)n > PEM_MAX) {
		snprintf(err, errlen, "%s: %s %s: larger than %u bytes", name, key, path, PEM_MAX);
		fclose(f);
		return NMQ_EINVAL;
	}
	if ((buf = malloc((size_t)n + 1)) == NULL) {
		snprintf(err, errlen, "%s: %s %s: out of memory", name, key, path);
		fclose(f);
		return NMQ_ENOMEM;
	}
	size_t got = fread(buf, 1, (size_t)n, f);
	if (ferror(f) != 0) {
		snprintf(
		    err, errlen, "%s: %s %s: cannot read: %s", name, key, path, strerror(errno));
		free(buf);
		fclose(f);
		return NMQ_EINVAL;
	}
	fclose(f);
	buf[got] = '\0';
	if (memchr(buf, '\0', got) != NULL || strstr(buf, "-----BEGIN ") == NULL) {
		snprintf(err, errlen, "%s: %s %s: not a PEM file", name, key, path);
		free(buf);
		return NMQ_EINVAL;
	}
	*out    = buf;
	*outlen = got;
	return NMQ_OK;
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
// with the password and matches the certificate. Returns NMQ_OK with the
// texts in *f (free with tls_files_free), or an error with a message
// naming the file in err.
static nmq_err tls_files_load(const tls_pem_spec *o, tls_files *f, char *err, size_t errlen)
{
	const char        *name = o->name != NULL ? o->name : "tls";
	char               why[160];
	mbedtls_x509_crt   crt;
	mbedtls_pk_context pk;
	nmq_err            e;
	int                rv;

	memset(f, 0, sizeof(*f));
	if (o->certfile == NULL || o->certfile[0] == '\0' || o->keyfile == NULL
	    || o->keyfile[0] == '\0') {
		snprintf(err, errlen, "%s: certfile and keyfile are required for TLS", name);
		return NMQ_EINVAL;
	}
	if (o->verify_peer && (o->cacertfile == NULL || o->cacertfile[0] == '\0')) {
		snprintf(err, errlen, "%s: verify_peer needs cacertfile", name);
		return NMQ_EINVAL;
	}
	if ((e = pem_read(name, "certfile", o->certfile, &f->cert, &f->cert_len, err, errlen))
	        != NMQ_OK
	    || (e = pem_read(name, "keyfile", o->keyfile, &f->key, &f->key_len, err, errlen))
	        != NMQ_OK) {
		tls_files_free(f);
		return e;
	}
	if (o->cacertfile != NULL && o->cacertfile[0] != '\0'
	    && (e = pem_read(name, "cacertfile", o->cacertfile, &f->ca, &f->ca_len, err, errlen))
	        != NMQ_OK) {
		tls_files_free(f);
		return e;
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
			return NMQ_EINVAL;
		}
	}
	return NMQ_OK;
fail:
	mbedtls_x509_crt_free(&crt);
	mbedtls_pk_free(&pk);
	tls_files_free(f);
	return NMQ_EINVAL;
}

// What both builders start with: o's files loaded into *f (the caller
// frees them), its client-certificate mode and its groups and ciphers,
// checked. On failure err names o and nothing is left to free.
static nmq_err tls_spec_prepare(const tls_pem_spec *o, tls_files *f, nng_tls_auth_mode *mode,
    tls_engine_params *params, char *err, size_t errlen)
{
	nmq_err e = tls_files_load(o, f, err, errlen);
	if (e != NMQ_OK) {
		return e;
	}
	*mode = NNG_TLS_AUTH_MODE_NONE;
	if (o->verify_peer) {
		*mode = o->fail_if_no_peer_cert ? NNG_TLS_AUTH_MODE_REQUIRED
		                                : NNG_TLS_AUTH_MODE_OPTIONAL;
	}
	*params = (tls_engine_params) { .groups = o->groups, .ciphers = o->ciphers };
	char why[128];
	if (tls_engine_params_check(params, why, sizeof(why)) != 0) {
		snprintf(err, errlen, "%s: %s", o->name != NULL ? o->name : "tls", why);
		tls_files_free(f);
		return NMQ_EINVAL;
	}
	return NMQ_OK;
}

// Checks the files of a TLS endpoint; see tls_pem.h.
nmq_err tls_pem_check(const tls_pem_spec *s, char *err, size_t errlen)
{
	tls_files         f;
	nng_tls_auth_mode mode;
	tls_engine_params params;
	nmq_err           e = tls_spec_prepare(s, &f, &mode, &params, err, errlen);
	if (e == NMQ_OK) {
		tls_files_free(&f);
	}
	return e;
}

// Builds a client configuration; see tls_pem.h.
nmq_err tls_pem_client_build(
    const tls_pem_spec *o, tls_engine_direct **dp, char *err, size_t errlen)
{
	const char        *name = o->name != NULL ? o->name : "tls";
	tls_pem_spec       s    = *o;
	tls_engine_direct *d    = NULL;
	tls_files          f;
	nmq_err            e;
	int                rv;
	if (s.verify_peer && (s.cacertfile == NULL || s.cacertfile[0] == '\0')
	    && access(TLS_PEM_SYSTEM_CA, R_OK) == 0) {
		s.cacertfile = TLS_PEM_SYSTEM_CA;
	}
	// A client that verifies must refuse a server that fails (OPTIONAL
	// would let the handshake go on).
	s.fail_if_no_peer_cert = true;
	if (s.certfile != NULL && s.certfile[0] != '\0') {
		// A client certificate: the same files and checks as a server's.
		return tls_pem_direct_build(&s, NNG_TLS_MODE_CLIENT, dp, err, errlen);
	}
	memset(&f, 0, sizeof(f));
	if (s.verify_peer && (s.cacertfile == NULL || s.cacertfile[0] == '\0')) {
		snprintf(err, errlen, "%s: verify_peer needs cacertfile", name);
		return NMQ_EINVAL;
	}
	if (s.cacertfile != NULL && s.cacertfile[0] != '\0'
	    && (e = pem_read(name, "cacertfile", s.cacertfile, &f.ca, &f.ca_len, err, errlen))
	        != NMQ_OK) {
		return e;
	}
	tls_engine_params params = { .groups = s.groups, .ciphers = s.ciphers };
	e                        = NMQ_ETLS;
	if ((rv = tls_engine_direct_alloc(&d, NNG_TLS_MODE_CLIENT, &params)) != 0) {
		snprintf(
		    err, errlen, "%s: cannot create TLS configuration: %s", name, nng_strerror(rv));
		e = transport_err_from_nng(rv);
		goto fail;
	}
	if (f.ca != NULL && (rv = tls_engine_direct_ca_chain(d, f.ca)) != 0) {
		snprintf(
		    err, errlen, "%s: cacertfile %s: %s", name, s.cacertfile, nng_strerror(rv));
		goto fail;
	}
	rv = tls_engine_direct_auth_mode(
	    d, s.verify_peer ? NNG_TLS_AUTH_MODE_REQUIRED : NNG_TLS_AUTH_MODE_NONE);
	if (rv != 0) {
		snprintf(err, errlen, "%s: TLS auth mode: %s", name, nng_strerror(rv));
		goto fail;
	}
	tls_files_free(&f);
	*dp = d;
	return NMQ_OK;
fail:
	tls_engine_direct_free(d);
	tls_files_free(&f);
	return e;
}

// Builds a configuration for code that drives mbed TLS itself; see
// tls_pem.h.
nmq_err tls_pem_direct_build(
    const tls_pem_spec *o, nng_tls_mode tmode, tls_engine_direct **dp, char *err, size_t errlen)
{
	const char        *name = o->name != NULL ? o->name : "tls";
	tls_engine_direct *d    = NULL;
	tls_files          f;
	nmq_err            e;
	int                rv;

	nng_tls_auth_mode mode;
	tls_engine_params params;
	if ((e = tls_spec_prepare(o, &f, &mode, &params, err, errlen)) != NMQ_OK) {
		return e;
	}
	e = NMQ_ETLS;
	if ((rv = tls_engine_direct_alloc(&d, tmode, &params)) != 0) {
		snprintf(
		    err, errlen, "%s: cannot create TLS configuration: %s", name, nng_strerror(rv));
		e = transport_err_from_nng(rv);
		goto fail;
	}
	if ((rv = tls_engine_direct_own_cert(d, f.cert, f.key, o->key_password)) != 0) {
		snprintf(err, errlen, "%s: certfile %s / keyfile %s: %s", name, o->certfile,
		    o->keyfile, nng_strerror(rv));
		goto fail;
	}
	if (f.ca != NULL && (rv = tls_engine_direct_ca_chain(d, f.ca)) != 0) {
		snprintf(
		    err, errlen, "%s: cacertfile %s: %s", name, o->cacertfile, nng_strerror(rv));
		goto fail;
	}
	if ((rv = tls_engine_direct_auth_mode(d, mode)) != 0) {
		snprintf(err, errlen, "%s: TLS auth mode: %s", name, nng_strerror(rv));
		goto fail;
	}
	tls_files_free(&f);
	*dp = d;
	return NMQ_OK;
fail:
	tls_engine_direct_free(d);
	tls_files_free(&f);
	return e;
}
