// The password database and the password check (see password.h).
#include "src/auth/password.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <cjson/cJSON.h>
#include <mbedtls/md.h>
#include <mbedtls/pkcs5.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/sha512.h>

enum pw_kind {
	PW_PLAIN = 0, // hash = SHA-512(password), for a length-hiding compare
	PW_SHA512, // $6$: hash = SHA-512(password || salt)
	PW_PBKDF2, // $7$: hash = PBKDF2-HMAC-SHA512(password, salt, iterations)
};

typedef struct pw_entry {
	char    *name; // NUL-terminated copy of the user name
	size_t   nlen;
	size_t   order; // position in the source object (the later one wins)
	int      kind; // enum pw_kind
	unsigned iterations;
	uint8_t *salt;
	size_t   slen;
	uint8_t  hash[AUTH_HASH_LEN];
} pw_entry;

struct auth_password_db {
	pw_entry *v; // sorted by name (length-aware bytewise order), unique
	size_t    n;
};

// A fixed salt for the dummy check: its value does not matter.
static const uint8_t dummy_salt[AUTH_PBKDF2_SALT_LEN]
    = { 0x6e, 0x61, 0x6e, 0x6f, 0x6d, 0x71, 0x2d, 0x64, 0x75, 0x6d, 0x6d, 0x79 };

static const char b64_alphabet[]
    = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Returns true when a and b (n bytes each) are equal, in time that depends
// only on n.
bool auth_ct_equal(const void *a, const void *b, size_t n)
{
	const volatile uint8_t *x    = a;
	const volatile uint8_t *y    = b;
	uint8_t                 diff = 0;

	for (size_t i = 0; i < n; i++) {
		diff |= (uint8_t)(x[i] ^ y[i]);
	}
	return diff == 0;
}

// Returns the 6-bit value of a base64 character, or -1 for any other byte.
static int b64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z') {
		return c - 'A';
	}
	if (c >= 'a' && c <= 'z') {
		return c - 'a' + 26;
	}
	if (c >= '0' && c <= '9') {
		return c - '0' + 52;
	}
	if (c == '+') {
		return 62;
	}
	if (c == '/') {
		return 63;
	}
	return -1;
}

// Decodes standard base64 text (n bytes; '=' padding optional, but when
// present the text length must be a multiple of 4) into dst. Returns the
// decoded length, or -1 when the text holds any other byte, has a
// impossible length, leaves non-zero unused bits, or decodes to more than
// cap bytes.
static long b64_decode(const char *src, size_t n, uint8_t *dst, size_t cap)
{
	size_t   pad  = 0;
	size_t   out  = 0;
	uint32_t acc  = 0;
	int      bits = 0;

	while (pad < 2 && n > 0 && src[n - 1] == '=') {
		n--;
		pad++;
	}
	if ((pad > 0 && (n + pad) % 4 != 0) || n % 4 == 1) {
		return -1;
	}
	if (n / 4 * 3 + (n % 4 == 0 ? 0 : n % 4 - 1) > cap) {
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		int v = b64_value((unsigned char)src[i]);
		if (v < 0) {
			return -1;
		}
		acc = ((acc << 6) | (uint32_t)v) & 0xffffff;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			dst[out++] = (uint8_t)(acc >> bits);
		}
	}
	if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) {
		return -1;
	}
	return (long)out;
}

// Encodes n bytes as padded standard base64 into dst (NUL-terminated).
// Returns the text length, or -1 when cap is too small.
static long b64_encode(const uint8_t *src, size_t n, char *dst, size_t cap)
{
	size_t need = (n + 2) / 3 * 4;
	size_t o    = 0;

	if (need + 1 > cap) {
		return -1;
	}
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)src[i] << 16;
		if (i + 1 < n) {
			v |= (uint32_t)src[i + 1] << 8;
		}
		if (i + 2 < n) {
			v |= src[i + 2];
		}
		dst[o++] = b64_alphabet[(v >> 18) & 63];
		dst[o++] = b64_alphabet[(v >> 12) & 63];
		dst[o++] = i + 1 < n ? b64_alphabet[(v >> 6) & 63] : '=';
		dst[o++] = i + 2 < n ? b64_alphabet[v & 63] : '=';
	}
	dst[o] = '\0';
	return (long)o;
}

// Computes SHA-512 over a then b into out. Returns 0, or -1 on an mbedtls
// failure.
static int sha512_two(
    const void *a, size_t alen, const void *b, size_t blen, uint8_t out[AUTH_HASH_LEN])
{
	mbedtls_sha512_context c;
	int                    rv = -1;

	mbedtls_sha512_init(&c);
	if (mbedtls_sha512_starts_ret(&c, 0) == 0
	    && mbedtls_sha512_update_ret(&c, (const unsigned char *)a, alen) == 0
	    && mbedtls_sha512_update_ret(&c, (const unsigned char *)b, blen) == 0
	    && mbedtls_sha512_finish_ret(&c, out) == 0) {
		rv = 0;
	}
	mbedtls_sha512_free(&c);
	return rv;
}

// Computes PBKDF2-HMAC-SHA512 of the password into out (AUTH_HASH_LEN
// bytes). Returns 0, or -1 on an mbedtls failure (out of memory).
static int pbkdf2_sha512(const void *pass, size_t plen, const uint8_t *salt, size_t slen,
    unsigned iterations, uint8_t out[AUTH_HASH_LEN])
{
	mbedtls_md_context_t     md;
	const mbedtls_md_info_t *info = mbedtls_md_info_from_type(MBEDTLS_MD_SHA512);
	int                      rv   = -1;

	mbedtls_md_init(&md);
	if (info != NULL && mbedtls_md_setup(&md, info, 1) == 0
	    && mbedtls_pkcs5_pbkdf2_hmac(&md, (const unsigned char *)pass, plen, salt, slen,
	           iterations, AUTH_HASH_LEN, out)
	        == 0) {
		rv = 0;
	}
	mbedtls_md_free(&md);
	return rv;
}

// Writes fmt into err (when err is not NULL), prefixed with the user name
// cut to 64 bytes and with control characters replaced by '?'.
static void set_err(char *err, size_t errlen, const char *user, const char *fmt, ...)
{
	char    name[68];
	char    why[160];
	size_t  i;
	va_list ap;

	if (err == NULL || errlen == 0) {
		return;
	}
	for (i = 0; user != NULL && user[i] != '\0' && i < 64; i++) {
		unsigned char c = (unsigned char)user[i];
		name[i]         = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
	}
	name[i] = '\0';
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	snprintf(err, errlen, "auth.password%s%s%s: %s", user != NULL ? "." : "", name,
	    user != NULL && strlen(user) > 64 ? "..." : "", why);
}

// Parses an unsigned decimal iteration count from s (n bytes). Returns the
// count, or 0 when s is empty, holds a non-digit, or exceeds
// AUTH_MAX_ITERATIONS.
static unsigned parse_iterations(const char *s, size_t n)
{
	unsigned long v = 0;

	if (n == 0 || n > 10) {
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9') {
			return 0;
		}
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	return v <= AUTH_MAX_ITERATIONS ? (unsigned)v : 0;
}

// Fills e's salt and hash from the "<b64 salt>$<b64 hash>" text at s (n
// bytes). Returns NULL, or a static reason for the error.
static const char *parse_salt_hash(pw_entry *e, const char *s, size_t n)
{
	const char *dollar = memchr(s, '$', n);
	uint8_t     salt[AUTH_MAX_SALT_LEN];
	long        sl;
	size_t      hl;

	if (dollar == NULL) {
		return "missing '$' between salt and hash";
	}
	hl = n - (size_t)(dollar - s) - 1;
	if (memchr(dollar + 1, '$', hl) != NULL) {
		return "too many '$' fields";
	}
	sl = b64_decode(s, (size_t)(dollar - s), salt, sizeof(salt));
	if (sl <= 0) {
		return "salt is not base64 of 1 to 256 bytes";
	}
	if (b64_decode(dollar + 1, hl, e->hash, sizeof(e->hash)) != AUTH_HASH_LEN) {
		return "hash is not base64 of 64 bytes";
	}
	if ((e->salt = malloc((size_t)sl)) == NULL) {
		return "out of memory";
	}
	memcpy(e->salt, salt, (size_t)sl);
	e->slen = (size_t)sl;
	return NULL;
}

// Fills e from the stored value v (vlen bytes). Returns NULL, or a static
// reason for the error.
static const char *parse_value(pw_entry *e, const char *v, size_t vlen)
{
	if (vlen >= 3 && memcmp(v, "$7$", 3) == 0) {
		const char *it  = v + 3;
		const char *end = memchr(it, '$', vlen - 3);
		if (end == NULL) {
			return "expected $7$<iterations>$<salt>$<hash>";
		}
		e->kind       = PW_PBKDF2;
		e->iterations = parse_iterations(it, (size_t)(end - it));
		if (e->iterations == 0) {
			return "iterations must be 1 to 1000000";
		}
		return parse_salt_hash(e, end + 1, vlen - (size_t)(end + 1 - v));
	}
	if (vlen >= 3 && memcmp(v, "$6$", 3) == 0) {
		e->kind = PW_SHA512;
		return parse_salt_hash(e, v + 3, vlen - 3);
	}
	if (vlen > AUTH_MAX_FIELD_LEN) {
		return "password longer than 65535 bytes";
	}
	e->kind = PW_PLAIN;
	if (sha512_two(v, vlen, "", 0, e->hash) != 0) {
		return "cannot hash the password";
	}
	return NULL;
}

// Orders entries by name (shorter first, then bytewise), then by source
// position.
static int entry_cmp(const void *a, const void *b)
{
	const pw_entry *x = a;
	const pw_entry *y = b;
	int             c;

	if (x->nlen != y->nlen) {
		return x->nlen < y->nlen ? -1 : 1;
	}
	if ((c = memcmp(x->name, y->name, x->nlen)) != 0) {
		return c;
	}
	return x->order < y->order ? -1 : (x->order > y->order ? 1 : 0);
}

// Frees what one entry owns and wipes its digest.
static void entry_fini(pw_entry *e)
{
	free(e->name);
	if (e->salt != NULL) {
		mbedtls_platform_zeroize(e->salt, e->slen);
		free(e->salt);
	}
	mbedtls_platform_zeroize(e->hash, sizeof(e->hash));
}

// Builds the database from the object of users. Returns it, or NULL with a
// reason in err.
auth_password_db *auth_password_db_alloc(const cJSON *users, char *err, size_t errlen)
{
	auth_password_db *db = calloc(1, sizeof(*db));
	size_t            n  = 0;
	size_t            k  = 0;

	if (err != NULL && errlen > 0) {
		err[0] = '\0';
	}
	if (db == NULL) {
		set_err(err, errlen, NULL, "out of memory");
		return NULL;
	}
	if (users == NULL) {
		return db;
	}
	if (!cJSON_IsObject(users)) {
		set_err(err, errlen, NULL, "expected an object of user: password pairs");
		free(db);
		return NULL;
	}
	for (const cJSON *c = users->child; c != NULL; c = c->next) {
		n++;
	}
	if (n > 0 && (db->v = calloc(n, sizeof(*db->v))) == NULL) {
		set_err(err, errlen, NULL, "out of memory");
		goto fail;
	}
	for (const cJSON *c = users->child; c != NULL; c = c->next) {
		pw_entry   *e = &db->v[db->n];
		const char *why;
		size_t      vlen;

		if (c->string == NULL || c->string[0] == '\0') {
			set_err(err, errlen, NULL, "empty user name");
			goto fail;
		}
		if (!cJSON_IsString(c) || c->valuestring == NULL) {
			set_err(err, errlen, c->string, "expected a password string");
			goto fail;
		}
		e->nlen = strlen(c->string);
		if (e->nlen > AUTH_MAX_FIELD_LEN) {
			set_err(err, errlen, c->string, "user name longer than 65535 bytes");
			goto fail;
		}
		if ((e->name = strdup(c->string)) == NULL) {
			set_err(err, errlen, c->string, "out of memory");
			goto fail;
		}
		e->order = db->n++;
		vlen     = strlen(c->valuestring);
		if ((why = parse_value(e, c->valuestring, vlen)) != NULL) {
			const char *what = "";
			if (e->kind == PW_PBKDF2) {
				what = "malformed $7$ hash: ";
			} else if (e->kind == PW_SHA512) {
				what = "malformed $6$ hash: ";
			}
			if (strcmp(why, "out of memory") == 0) {
				what = "";
			}
			set_err(err, errlen, c->string, "%s%s", what, why);
			goto fail;
		}
	}
	if (db->n > 1) {
		qsort(db->v, db->n, sizeof(*db->v), entry_cmp);
	}
	// Keep only the last entry of each run of equal names.
	for (size_t i = 0; i < db->n; i++) {
		if (i + 1 < db->n && db->v[i].nlen == db->v[i + 1].nlen
		    && memcmp(db->v[i].name, db->v[i + 1].name, db->v[i].nlen) == 0) {
			entry_fini(&db->v[i]);
			continue;
		}
		db->v[k++] = db->v[i];
	}
	db->n = k;
	return db;

fail:
	auth_password_db_free(db);
	return NULL;
}

// Frees the database. NULL is allowed.
void auth_password_db_free(auth_password_db *db)
{
	if (db == NULL) {
		return;
	}
	for (size_t i = 0; i < db->n; i++) {
		entry_fini(&db->v[i]);
	}
	free(db->v);
	free(db);
}

// Returns the number of users.
size_t auth_password_db_count(const auth_password_db *db)
{
	return db != NULL ? db->n : 0;
}

// Returns the entry named user (ulen bytes), or NULL.
static const pw_entry *find(const auth_password_db *db, const char *user, size_t ulen)
{
	size_t lo = 0;
	size_t hi = db->n;

	while (lo < hi) {
		size_t          mid = lo + (hi - lo) / 2;
		const pw_entry *e   = &db->v[mid];
		int             c;
		if (e->nlen != ulen) {
			c = e->nlen < ulen ? -1 : 1;
		} else {
			c = memcmp(e->name, user, ulen);
		}
		if (c == 0) {
			return e;
		}
		if (c < 0) {
			lo = mid + 1;
		} else {
			hi = mid;
		}
	}
	return NULL;
}

// Checks a user and password against the database. Returns an enum
// auth_result.
int auth_password_check(
    const auth_password_db *db, const char *user, size_t ulen, const char *pass, size_t plen)
{
	const pw_entry *e;
	uint8_t         got[AUTH_HASH_LEN];
	int             rv;

	if (db == NULL || user == NULL || (e = find(db, user, ulen)) == NULL) {
		return AUTH_UNKNOWN_USER;
	}
	if (pass == NULL || plen > AUTH_MAX_FIELD_LEN) {
		return AUTH_BAD_PASSWORD;
	}
	switch (e->kind) {
	case PW_PBKDF2:
		rv = pbkdf2_sha512(pass, plen, e->salt, e->slen, e->iterations, got);
		break;
	case PW_SHA512:
		rv = sha512_two(pass, plen, e->salt, e->slen, got);
		break;
	default:
		rv = sha512_two(pass, plen, "", 0, got);
		break;
	}
	if (rv != 0) {
		mbedtls_platform_zeroize(got, sizeof(got));
		return AUTH_BAD_PASSWORD;
	}
	rv = auth_ct_equal(got, e->hash, AUTH_HASH_LEN) ? AUTH_OK : AUTH_BAD_PASSWORD;
	mbedtls_platform_zeroize(got, sizeof(got));
	return rv;
}

// Spends the time of one default $7$ check.
void auth_password_dummy_check(const char *pass, size_t plen)
{
	uint8_t out[AUTH_HASH_LEN];

	if (pass == NULL || plen > AUTH_MAX_FIELD_LEN) {
		pass = "";
		plen = 0;
	}
	(void)pbkdf2_sha512(
	    pass, plen, dummy_salt, sizeof(dummy_salt), AUTH_PBKDF2_ITERATIONS, out);
	mbedtls_platform_zeroize(out, sizeof(out));
}

// Fills buf with n random bytes from the kernel. Returns 0 or -1.
static int random_bytes(uint8_t *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = getrandom(buf + got, n - got, 0);
		if (r < 0) {
			if (errno == EINTR) {
				continue;
			}
			return -1;
		}
		got += (size_t)r;
	}
	return 0;
}

// Writes a new $7$ entry for pass into out. Returns NMQ_OK, NMQ_EINVAL or
// NMQ_EIO.
nmq_err auth_password_hash_new(const char *pass, size_t plen, char *out, size_t outlen)
{
	uint8_t salt[AUTH_PBKDF2_SALT_LEN];
	uint8_t key[AUTH_HASH_LEN];
	char    s64[32];
	char    k64[96];
	int     rv = -1;

	if (out == NULL || outlen < AUTH_PBKDF2_ENTRY_MAX || plen > AUTH_MAX_FIELD_LEN
	    || (pass == NULL && plen > 0)) {
		return NMQ_EINVAL;
	}
	if (pass == NULL) {
		pass = "";
	}
	if (random_bytes(salt, sizeof(salt)) == 0
	    && pbkdf2_sha512(pass, plen, salt, sizeof(salt), AUTH_PBKDF2_ITERATIONS, key) == 0
	    && b64_encode(salt, sizeof(salt), s64, sizeof(s64)) > 0
	    && b64_encode(key, sizeof(key), k64, sizeof(k64)) > 0) {
		int w = snprintf(out, outlen, "$7$%d$%s$%s", AUTH_PBKDF2_ITERATIONS, s64, k64);
		rv    = (w > 0 && (size_t)w < outlen) ? 0 : -1;
	}
	mbedtls_platform_zeroize(key, sizeof(key));
	mbedtls_platform_zeroize(salt, sizeof(salt));
	if (rv != 0) {
		out[0] = '\0';
		return NMQ_EIO;
	}
	return NMQ_OK;
}
