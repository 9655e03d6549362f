// REST authentication: Basic and RS256 JWT. See http_auth.h.
#include "src/http/http_auth.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <mbedtls/base64.h>
#include <mbedtls/pk.h>
#include <mbedtls/sha256.h>

#include "src/http/http_server.h"

// Longest Authorization value looked at (a JWT with a 4096-bit signature
// and a modest payload fits easily).
#define AUTH_MAX 8192

struct http_auth {
	int                kind;
	char              *username;
	char              *password;
	mbedtls_pk_context pk;
	bool               have_pk;
};

http_auth *http_auth_alloc(int kind, const char *username, const char *password,
    const char *keyfile, char *err, size_t errlen)
{
	http_auth *a = calloc(1, sizeof(*a));
	if (a == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	a->kind = kind;
	mbedtls_pk_init(&a->pk);
	if (kind == HTTP_AUTH_BASIC && username != NULL && password != NULL) {
		a->username = strdup(username);
		a->password = strdup(password);
		if (a->username == NULL || a->password == NULL) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
	}
	if (kind == HTTP_AUTH_JWT) {
		if (keyfile == NULL) {
			snprintf(err, errlen, "http_server.jwt.public.keyfile is required for jwt");
			goto fail;
		}
		int rc = mbedtls_pk_parse_public_keyfile(&a->pk, keyfile);
		if (rc != 0 || !mbedtls_pk_can_do(&a->pk, MBEDTLS_PK_RSA)) {
			snprintf(err, errlen, "%s: not a PEM RSA public key (mbed TLS -0x%04x)",
			    keyfile, (unsigned)-rc);
			goto fail;
		}
		a->have_pk = true;
	}
	return a;
fail:
	http_auth_free(a);
	return NULL;
}

void http_auth_free(http_auth *a)
{
	if (a == NULL) {
		return;
	}
	free(a->username);
	free(a->password);
	mbedtls_pk_free(&a->pk);
	free(a);
}

// Constant-time equality of two byte strings: the time depends only on
// the length of the expected one.
static bool ct_equal(const char *got, size_t gn, const char *want)
{
	size_t        wn   = strlen(want);
	unsigned char diff = (unsigned char)(gn != wn);
	for (size_t i = 0; i < wn; i++) {
		unsigned char g = i < gn ? (unsigned char)got[i] : 0;
		diff |= (unsigned char)(g ^ (unsigned char)want[i]);
	}
	return diff == 0;
}

static int check_basic(const http_auth *a, const char *v, size_t n)
{
	unsigned char dec[1024];
	size_t        dn = 0;
	if (n == 0) {
		return REST_EMPTY_CREDENTIALS;
	}
	if (mbedtls_base64_decode(dec, sizeof(dec) - 1, &dn, (const unsigned char *)v, n) != 0) {
		return REST_WRONG_CREDENTIALS;
	}
	const unsigned char *colon = memchr(dec, ':', dn);
	if (colon == NULL) {
		return REST_WRONG_CREDENTIALS;
	}
	size_t ulen = (size_t)(colon - dec);
	size_t plen = dn - ulen - 1;
	if (ulen == 0 || plen == 0) {
		return REST_EMPTY_CREDENTIALS;
	}
	if (a->username == NULL || a->password == NULL) {
		return REST_WRONG_CREDENTIALS;
	}
	// Both compared always, so the time does not tell which one was wrong.
	bool u_ok = ct_equal((const char *)dec, ulen, a->username);
	bool p_ok = ct_equal((const char *)colon + 1, plen, a->password);
	return u_ok && p_ok ? 0 : REST_WRONG_CREDENTIALS;
}

// Decodes base64url (no padding) into out. Returns the length or -1.
static long b64url_decode(const char *in, size_t n, unsigned char *out, size_t cap)
{
	if (n > AUTH_MAX) {
		return -1;
	}
	char  *t = malloc(n + 4);
	size_t k = 0;
	if (t == NULL) {
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		char c = in[i];
		if (c == '-') {
			c = '+';
		} else if (c == '_') {
			c = '/';
		} else if (c == '+' || c == '/' || c == '=') {
			free(t);
			return -1;
		}
		t[k++] = c;
	}
	while (k % 4 != 0) {
		t[k++] = '=';
	}
	size_t olen = 0;
	int    rc   = mbedtls_base64_decode(out, cap, &olen, (unsigned char *)t, k);
	free(t);
	return rc == 0 ? (long)olen : -1;
}

static int check_jwt(const http_auth *a, const char *v, size_t n)
{
	if (n == 0) {
		return REST_EMPTY_CREDENTIALS;
	}
	const char *d1 = memchr(v, '.', n);
	const char *d2 = d1 != NULL ? memchr(d1 + 1, '.', (size_t)(v + n - d1 - 1)) : NULL;
	if (d1 == NULL || d2 == NULL || !a->have_pk) {
		return REST_WRONG_CREDENTIALS;
	}
	int            rc   = REST_WRONG_CREDENTIALS;
	unsigned char *hdr  = malloc(AUTH_MAX);
	unsigned char *body = malloc(AUTH_MAX);
	unsigned char *sig  = malloc(AUTH_MAX);
	cJSON         *jh   = NULL;
	cJSON         *jb   = NULL;
	if (hdr == NULL || body == NULL || sig == NULL) {
		goto out;
	}
	long hn = b64url_decode(v, (size_t)(d1 - v), hdr, AUTH_MAX - 1);
	long bn = b64url_decode(d1 + 1, (size_t)(d2 - d1 - 1), body, AUTH_MAX - 1);
	long sn = b64url_decode(d2 + 1, (size_t)(v + n - d2 - 1), sig, AUTH_MAX);
	if (hn <= 0 || bn <= 0 || sn <= 0) {
		goto out;
	}
	hdr[hn]          = '\0';
	body[bn]         = '\0';
	jh               = cJSON_ParseWithLength((const char *)hdr, (size_t)hn);
	const cJSON *alg = cJSON_GetObjectItemCaseSensitive(jh, "alg");
	if (!cJSON_IsString(alg) || strcmp(alg->valuestring, "RS256") != 0) {
		goto out; // "none", HS256 with the public key as secret, ...: refused
	}
	unsigned char hash[32];
	if (mbedtls_sha256_ret((const unsigned char *)v, (size_t)(d2 - v), hash, 0) != 0
	    || mbedtls_pk_verify((mbedtls_pk_context *)&a->pk, MBEDTLS_MD_SHA256, hash,
	           sizeof(hash), sig, (size_t)sn)
	        != 0) {
		goto out;
	}
	jb = cJSON_ParseWithLength((const char *)body, (size_t)bn);
	if (!cJSON_IsObject(jb)) {
		goto out;
	}
	const cJSON *exp = cJSON_GetObjectItemCaseSensitive(jb, "exp");
	if (exp != NULL) {
		if (!cJSON_IsNumber(exp)) {
			goto out;
		}
		if (exp->valuedouble <= (double)time(NULL)) {
			rc = REST_TOKEN_EXPIRED;
			goto out;
		}
	}
	rc = 0;
out:
	cJSON_Delete(jh);
	cJSON_Delete(jb);
	free(hdr);
	free(body);
	free(sig);
	return rc;
}

int http_auth_check(const http_auth *a, const http_str *authorization)
{
	if (a->kind == HTTP_AUTH_NONE) {
		return 0;
	}
	if (authorization == NULL || authorization->n == 0) {
		return REST_EMPTY_CREDENTIALS;
	}
	if (authorization->n > AUTH_MAX) {
		return REST_WRONG_CREDENTIALS;
	}
	const char *v      = authorization->p;
	size_t      n      = authorization->n;
	const char *scheme = a->kind == HTTP_AUTH_JWT ? "bearer" : "basic";
	size_t      sl     = strlen(scheme);
	http_str    s      = { v, n > sl ? sl : n };
	if (n <= sl || !http_str_ieq(s, scheme) || v[sl] != ' ') {
		return REST_WRONG_CREDENTIALS;
	}
	v += sl;
	n -= sl;
	while (n > 0 && *v == ' ') {
		v++;
		n--;
	}
	return a->kind == HTTP_AUTH_JWT ? check_jwt(a, v, n) : check_basic(a, v, n);
}
