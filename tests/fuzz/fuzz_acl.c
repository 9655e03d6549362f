// libFuzzer target for the ACL engine and the password database.
//
// Input: a JSON document, then a NUL byte or a blank line, then query
// lines. The document is built both as ACL rules and as a password list;
// the whole document text is also tried as one stored password value (to
// reach the $7$ / $6$ / base64 parsers with any bytes). Query lines, fields
// separated by tabs:
//   w<clientid>\t<username or empty>\t<peer>   set who asks (empty username = none)
//   W<clientid>                                 no username, no peer
//   p<topic>          publish check
//   s<filter>         subscribe check
//   c<rule>\t<req>\t<topic>   covers(rule, req); if so and req matches
//                     topic, rule must match topic too
//   u<user>\t<pass>   password check
// Checked: decisions are ALLOW or DENY, covers is reflexive on valid filters
// and sound against the sample topic, an acl decision does not change when
// asked through the cache.

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "nng/codec/mqtt_codec.h"
#include "src/auth/acl.h"
#include "src/auth/acl_cache.h"
#include "src/auth/password.h"
#include "src/topic/topic_tree.h"

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_acl: check failed: %s (%s:%d)\n", #cond, __FILE__,   \
			    __LINE__);                                                             \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

// Returns true when the text holds a $7$ entry with a large iteration count:
// such entries are built but not checked, so that a run stays fast.
static bool slow_hash(const char *s, size_t n)
{
	for (size_t i = 0; i + 3 < n; i++) {
		if (memcmp(s + i, "$7$", 3) == 0) {
			size_t d = 0;
			while (i + 3 + d < n && s[i + 3 + d] >= '0' && s[i + 3 + d] <= '9') {
				d++;
			}
			if (d > 4) {
				return true;
			}
		}
	}
	return false;
}

// Splits a tab-separated field off *p (up to end); returns its start, NUL
// terminated in place.
static char *field(char **p, char *end)
{
	char *s = *p;
	char *t = memchr(s, '\t', (size_t)(end - s));

	if (t == NULL) {
		*p = end;
		return s;
	}
	*t = '\0';
	*p = t + 1;
	return s;
}

// Runs the query lines of q (n bytes, modified in place).
static void run_queries(const acl *a, const auth_password_db *db, bool checks_ok, char *q, size_t n)
{
	acl_client who   = { "fuzz", NULL, NULL };
	acl_cache *cache = acl_cache_alloc(4, 1000);
	uint64_t   now   = 0;
	char      *end   = q + n;

	while (q < end) {
		char *nl   = memchr(q, '\n', (size_t)(end - q));
		char *lend = nl != NULL ? nl : end;
		char *p    = q + 1;
		char  kind = *q;
		*lend      = '\0';

		if (kind == 'w') {
			who.clientid = field(&p, lend);
			who.username = field(&p, lend);
			who.peer     = field(&p, lend);
			if (who.username[0] == '\0') {
				who.username = NULL;
			}
			acl_cache_flush(cache);
		} else if (kind == 'W') {
			who = (acl_client) { p, NULL, NULL };
			acl_cache_flush(cache);
		} else if (kind == 'p' || kind == 's') {
			int    act = kind == 'p' ? ACL_PUBLISH : ACL_SUBSCRIBE;
			size_t len = (size_t)(lend - p);
			int    d   = acl_check(a, &who, act, p, len);
			CHECK(d == ACL_ALLOW || d == ACL_DENY);
			CHECK(acl_cache_check(cache, a, &who, act, p, len, now) == d);
			CHECK(acl_cache_check(cache, a, &who, act, p, len, now + 1) == d);
			int m = acl_match(a, &who, act, p, len);
			CHECK(m == ACL_ALLOW || m == ACL_DENY || m == ACL_NOMATCH);
			now += 400;
		} else if (kind == 'c') {
			char  *r  = field(&p, lend);
			char  *f  = field(&p, lend);
			char  *t  = field(&p, lend);
			size_t rl = strlen(r);
			size_t fl = strlen(f);
			size_t tl = strlen(t);
			if (mqtt_topic_filter_valid((const uint8_t *)r, rl)) {
				CHECK(acl_filter_covers(r, rl, r, rl));
			}
			if (acl_filter_covers(r, rl, f, fl) && topic_filter_match(f, fl, t, tl)) {
				CHECK(topic_filter_match(r, rl, t, tl));
			}
		} else if (kind == 'u' && checks_ok) {
			char *u = field(&p, lend);
			char *w = field(&p, lend);
			int   r = auth_password_check(db, u, strlen(u), w, strlen(w));
			CHECK(r == AUTH_OK || r == AUTH_BAD_PASSWORD || r == AUTH_UNKNOWN_USER);
		}
		q = lend + 1;
	}
	acl_cache_free(cache);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char             *buf;
	size_t            jlen = size;
	char              err[256];
	cJSON            *doc;
	acl              *a;
	auth_password_db *db;
	bool              checks_ok;

	if (size > 1 << 16) {
		return 0;
	}
	if ((buf = malloc(size + 1)) == NULL) {
		return 0;
	}
	memcpy(buf, data, size);
	buf[size] = '\0';
	for (size_t i = 0; i < size; i++) {
		if (buf[i] == '\0' || (buf[i] == '\n' && i + 1 < size && buf[i + 1] == '\n')) {
			jlen = i;
			break;
		}
	}
	checks_ok = !slow_hash(buf, size);

	// The document text as one stored password value.
	{
		char   save = buf[jlen];
		cJSON *one  = cJSON_CreateObject();
		buf[jlen]   = '\0';
		if (one != NULL && cJSON_AddStringToObject(one, "u", buf) != NULL) {
			db = auth_password_db_alloc(one, err, sizeof(err));
			if (db != NULL && checks_ok) {
				(void)auth_password_check(db, "u", 1, buf, jlen);
				(void)auth_password_check(db, "u", 1, "x", 1);
			}
			auth_password_db_free(db);
		}
		cJSON_Delete(one);
		buf[jlen] = save;
	}

	doc = cJSON_ParseWithLength(buf, jlen);
	a   = acl_alloc(doc, size % 2 == 0 ? ACL_ALLOW : ACL_DENY, err, sizeof(err));
	CHECK(a != NULL || strlen(err) > 0);
	db = auth_password_db_alloc(doc, err, sizeof(err));
	CHECK(db != NULL || strlen(err) > 0);
	cJSON_Delete(doc);

	if (jlen < size) {
		size_t skip = buf[jlen] == '\0' ? 1 : 2;
		if (jlen + skip <= size) {
			run_queries(a, db, checks_ok, buf + jlen + skip, size - jlen - skip);
		}
	}
	acl_free(a);
	auth_password_db_free(db);
	free(buf);
	return 0;
}
