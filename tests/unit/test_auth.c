// Unit tests of src/auth: the password database (plain text, $7$, $6$),
// the CONNECT decision, the auth context and `nanomq passwd`.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/auth/auth.h"
#include "src/auth/auth_passwd.h"
#include "src/auth/password.h"
#include "src/conf/conf.h"

// Produced by Debian 12's mosquitto_passwd 2.0.11:
//   mosquitto_passwd -c -b /tmp/v7 user pass
//   mosquitto_passwd -b /tmp/v7 admin public
//   mosquitto_passwd -b /tmp/v7 u2 'pässwörd with spaces'
//   mosquitto_passwd -b /tmp/v7 empty ''
#define M7_USER                                                                                    \
	"$7$101$WOiI+Cjipcc5dZYH$"                                                                 \
	"AOfBb7L43jtLmnWpaRW0jC1CFDPfaQ7sPwWFrH0RCl9xqpXkAOFuArCslrVxUQjMRfkn"                     \
	"EC+S8+DydBuKfZ4GvQ=="
#define M7_ADMIN                                                                                   \
	"$7$101$YvIxF61bbVT1rIKj$S1Hg+j1Q6jyXjtP4KISPsCJxV0KEsgYptTGKpU1TYR7Qd70+"                 \
	"KUwYaYe50HwpKqFm2SFZ"                                                                     \
	"z++B1LN2EAkazKp/Hg=="
#define M7_U2                                                                                      \
	"$7$101$RwSuLINIPgZIESvK$Jd0OtlK9mFbEY904Pa2qcGI3rTI/8DV35vuLXoKqtGv9AtW/"                 \
	"zeJWB84EqKHzNFMJ9gNr"                                                                     \
	"bP/C4Uh+06os2UBuBA=="
#define M7_EMPTY                                                                                   \
	"$7$101$WpAQJCV/tCQV6JeB$x/W9vU/jNVw+3HPX3i6ccgre5Tyaom8bfDLY/"                            \
	"A4TadulI2xd1eWu0FXaIvplpiYMW9WO"                                                          \
	"BWZyG/XxEQiZj+BDfg=="
// Produced by the same tool in Mosquitto 1.x mode:
//   mosquitto_passwd -H sha512 -c -b /tmp/v6 user pass
//   mosquitto_passwd -H sha512 -b /tmp/v6 admin public
#define M6_USER                                                                                    \
	"$6$Bk6ucGF6AogCcMWn$EV4XcTHfu+"                                                           \
	"c2vB0k2eUhv6DXWPgMYeLKCq0VTWSg7m3fRRqUFCQj5Q03sDfXlw37iGMp8SBEe"                          \
	"FZQkwuqlk0g+g=="
#define M6_ADMIN                                                                                   \
	"$6$Vu8x5AQl6YyQv0Wm$yVWScvGY+ei1Z6VCKCIb0cuvlIy4GlQyTjFzUkYxv8NkK0hdily2m/"               \
	"xaXKGITMAYUnX0Mv74N"                                                                      \
	"gXyn3z1wjY96Q=="
// Other iteration counts and a 16-byte salt, password "secret", from
// Python: hashlib.pbkdf2_hmac('sha512', b'secret', b'nanomq-test-salt', N)
#define P7_1000                                                                                    \
	"$7$1000$bmFub21xLXRlc3Qtc2FsdA==$"                                                        \
	"PmKnkthbo4kEcCmGpMYoRe7Tb57jjmmd3Jm9NvXx0mbUZhPNSACdcRqOYhx2"                             \
	"0q+SZLv+cNBiXLQ1EcNXrVQ44w=="
#define P7_1                                                                                       \
	"$7$1$bmFub21xLXRlc3Qtc2FsdA==$CclDeQDCqdo0Q8gntKJU+l6bJ7DFf3J+8JYfuHzca+nDPjxPgtmz/"      \
	"Lh3so21d4s"                                                                               \
	"BBMmL3Cq2D43etBhL7+4pTg=="

// Builds a database from a JSON object text; fails the test on error.
static auth_password_db *db_from(const char *json)
{
	char              err[256];
	cJSON            *o = cJSON_Parse(json);
	auth_password_db *db;

	assert_non_null(o);
	db = auth_password_db_alloc(o, err, sizeof(err));
	if (db == NULL) {
		fail_msg("%s", err);
	}
	cJSON_Delete(o);
	return db;
}

// Returns auth_password_check() for NUL-terminated strings.
static int check(const auth_password_db *db, const char *u, const char *p)
{
	return auth_password_check(db, u, u != NULL ? strlen(u) : 0, p, p != NULL ? strlen(p) : 0);
}

static void test_ct_equal(void **state)
{
	(void)state;
	uint8_t a[64];
	uint8_t b[64];
	memset(a, 0x5a, sizeof(a));
	memcpy(b, a, sizeof(b));
	assert_true(auth_ct_equal(a, b, sizeof(a)));
	assert_true(auth_ct_equal(a, b, 0));
	for (size_t i = 0; i < sizeof(a); i += 9) {
		b[i] ^= 0x01;
		assert_false(auth_ct_equal(a, b, sizeof(a)));
		b[i] ^= 0x01;
	}
	b[63] = 0xa5;
	assert_false(auth_ct_equal(a, b, sizeof(a)));
	assert_true(auth_ct_equal(a, b, 63));
}

static void test_plaintext(void **state)
{
	(void)state;
	auth_password_db *db
	    = db_from("{\"admin\": \"public\", \"client\": \"\", \"x.y\": \"$5$not-a-hash\", "
	              "\"d\": \"$\", \"e\": \"$7\", \"f\": \"$66$a$b\"}");
	assert_int_equal(auth_password_db_count(db), 6);
	assert_int_equal(check(db, "admin", "public"), AUTH_OK);
	assert_int_equal(check(db, "admin", "Public"), AUTH_BAD_PASSWORD);
	assert_int_equal(check(db, "admin", "public "), AUTH_BAD_PASSWORD);
	assert_int_equal(check(db, "admin", "publi"), AUTH_BAD_PASSWORD);
	assert_int_equal(check(db, "admin", ""), AUTH_BAD_PASSWORD);
	assert_int_equal(check(db, "admin", NULL), AUTH_BAD_PASSWORD);
	assert_int_equal(check(db, "client", ""), AUTH_OK);
	assert_int_equal(check(db, "client", NULL), AUTH_BAD_PASSWORD); // absent is not empty
	assert_int_equal(check(db, "x.y", "$5$not-a-hash"), AUTH_OK);
	assert_int_equal(check(db, "d", "$"), AUTH_OK);
	assert_int_equal(check(db, "e", "$7"), AUTH_OK);
	assert_int_equal(check(db, "f", "$66$a$b"), AUTH_OK);
	assert_int_equal(check(db, "Admin", "public"), AUTH_UNKNOWN_USER);
	assert_int_equal(check(db, "admi", "public"), AUTH_UNKNOWN_USER);
	assert_int_equal(check(db, "admin2", "public"), AUTH_UNKNOWN_USER);
	assert_int_equal(check(db, "", "public"), AUTH_UNKNOWN_USER);
	assert_int_equal(check(db, NULL, "public"), AUTH_UNKNOWN_USER);
	// Lengths are honoured: "adminX" cut to 5 bytes is "admin".
	assert_int_equal(auth_password_check(db, "adminX", 5, "publicY", 6), AUTH_OK);
	// A password with an embedded NUL is not the stored one.
	assert_int_equal(auth_password_check(db, "admin", 5, "public\0", 7), AUTH_BAD_PASSWORD);
	auth_password_db_free(db);
	assert_int_equal(check(NULL, "admin", "public"), AUTH_UNKNOWN_USER);
	assert_int_equal(auth_password_db_count(NULL), 0);
	auth_password_db_free(NULL);
}

static void test_mosquitto_7(void **state)
{
	(void)state;
	auth_password_db *db = db_from("{\"user\": \"" M7_USER "\", \"admin\": \"" M7_ADMIN
	                               "\", \"u2\": \"" M7_U2 "\", \"empty\": \"" M7_EMPTY "\"}");
	assert_int_equal(check(db, "user", "pass"), AUTH_OK);
	assert_int_equal(check(db, "user", "pass2"), AUTH_BAD_PASSWORD);
	assert_int_equal(check(db, "user", "Pass"), AUTH_BAD_PASSWORD);
	assert_int_equal(check(db, "user", ""), AUTH_BAD_PASSWORD);
	assert_int_equal(check(db, "user", NULL), AUTH_BAD_PASSWORD);
	assert_int_equal(check(db, "admin", "public"), AUTH_OK);
	assert_int_equal(check(db, "admin", "pass"), AUTH_BAD_PASSWORD);
	assert_int_equal(check(db, "u2", "pässwörd with spaces"), AUTH_OK);
	assert_int_equal(check(db, "u2", "passwort with spaces"), AUTH_BAD_PASSWORD);
	assert_int_equal(check(db, "empty", ""), AUTH_OK);
	assert_int_equal(check(db, "empty", " "), AUTH_BAD_PASSWORD);
	// The hash string itself is not a password.
	assert_int_equal(check(db, "user", M7_USER), AUTH_BAD_PASSWORD);
	auth_password_db_free(db);
}

static void test_mosquitto_6(void **state)
{
	(void)state;
	auth_password_db *db = db_from("{\"user\": \"" M6_USER "\", \"admin\": \"" M6_ADMIN "\"}");
	assert_int_equal(check(db, "user", "pass"), AUTH_OK);
	assert_int_equal(check(db, "user", "pas"), AUTH_BAD_PASSWORD);
	assert_int_equal(check(db, "user", "passpass"), AUTH_BAD_PASSWORD);
	assert_int_equal(check(db, "admin", "public"), AUTH_OK);
	assert_int_equal(check(db, "admin", "pass"), AUTH_BAD_PASSWORD);
	assert_int_equal(check(db, "admin", NULL), AUTH_BAD_PASSWORD);
	auth_password_db_free(db);
}

static void test_other_iterations(void **state)
{
	(void)state;
	auth_password_db *db = db_from("{\"a\": \"" P7_1000 "\", \"b\": \"" P7_1 "\"}");
	assert_int_equal(check(db, "a", "secret"), AUTH_OK);
	assert_int_equal(check(db, "a", "Secret"), AUTH_BAD_PASSWORD);
	assert_int_equal(check(db, "b", "secret"), AUTH_OK);
	assert_int_equal(check(db, "b", "secreT"), AUTH_BAD_PASSWORD);
	auth_password_db_free(db);
}

static void test_unpadded_base64(void **state)
{
	(void)state;
	// The same entry without its '=' padding is accepted.
	auth_password_db *db = db_from(
	    "{\"user\": \"$7$101$WOiI+Cjipcc5dZYH$AOfBb7L43jtLmnWpaRW0jC1CFDPfaQ7sPwWFrH0RCl9xq"
	    "pXkAOFuArCslrVxUQjMRfknEC+S8+DydBuKfZ4GvQ\"}");
	assert_int_equal(check(db, "user", "pass"), AUTH_OK);
	auth_password_db_free(db);
}

// Expects building {user: value} to fail with a message naming the user and
// holding `why`.
static void expect_bad(const char *value, const char *why)
{
	char              err[256];
	cJSON            *o = cJSON_CreateObject();
	auth_password_db *db;

	cJSON_AddStringToObject(o, "baduser", value);
	db = auth_password_db_alloc(o, err, sizeof(err));
	cJSON_Delete(o);
	if (db != NULL) {
		auth_password_db_free(db);
		fail_msg("accepted \"%s\"", value);
	}
	if (strstr(err, "auth.password.baduser") == NULL || strstr(err, why) == NULL) {
		fail_msg("for \"%s\": unexpected message \"%s\"", value, err);
	}
	// The stored value is never echoed.
	if (strlen(value) > 12 && strstr(err, value) != NULL) {
		fail_msg("message leaks the value: %s", err);
	}
}

static void test_malformed(void **state)
{
	(void)state;
	static const char H64[]
	    = "AOfBb7L43jtLmnWpaRW0jC1CFDPfaQ7sPwWFrH0RCl9xqpXkAOFuArCslrVxUQjMRf"
	      "knEC+S8+DydBuKfZ4GvQ==";
	char v[512];

	expect_bad("$7$", "$7$");
	expect_bad("$7$101", "$7$");
	expect_bad("$7$101$", "$7$");
	expect_bad("$7$101$WOiI+Cjipcc5dZYH", "$7$");
	expect_bad("$7$$WOiI+Cjipcc5dZYH$x", "iterations");
	expect_bad("$7$0$WOiI+Cjipcc5dZYH$x", "iterations");
	expect_bad("$7$-1$WOiI+Cjipcc5dZYH$x", "iterations");
	expect_bad("$7$ 101$WOiI+Cjipcc5dZYH$x", "iterations");
	expect_bad("$7$1x$WOiI+Cjipcc5dZYH$x", "iterations");
	expect_bad("$7$1000001$WOiI+Cjipcc5dZYH$x", "iterations");
	expect_bad("$7$99999999999999999999$WOiI+Cjipcc5dZYH$x", "iterations");
	snprintf(v, sizeof(v), "$7$101$$%s", H64);
	expect_bad(v, "salt");
	snprintf(v, sizeof(v), "$7$101$WOiI+Cjip!c5dZYH$%s", H64);
	expect_bad(v, "salt");
	snprintf(v, sizeof(v), "$7$101$WOiI+Cjipcc5dZYHA$%s", H64); // 4k+1 characters
	expect_bad(v, "salt");
	snprintf(v, sizeof(v), "$7$101$WOiI=Cjipcc5dZYH$%s", H64);
	expect_bad(v, "salt");
	expect_bad("$7$101$WOiI+Cjipcc5dZYH$", "hash");
	expect_bad("$7$101$WOiI+Cjipcc5dZYH$AAAA", "hash");
	snprintf(v, sizeof(v), "$7$101$WOiI+Cjipcc5dZYH$%sAAAA", H64);
	expect_bad(v, "hash");
	snprintf(v, sizeof(v), "$7$101$WOiI+Cjipcc5dZYH$%.84s", H64); // 63 bytes
	expect_bad(v, "hash");
	// Non-zero unused bits in the last character ('Q' -> 'R').
	snprintf(v, sizeof(v), "$7$101$WOiI+Cjipcc5dZYH$%.85sR==", H64);
	expect_bad(v, "hash");
	snprintf(v, sizeof(v), "$7$101$WOiI+Cjipcc5dZYH$%s$", H64);
	expect_bad(v, "$");
	snprintf(v, sizeof(v), "$7$101$WOiI+Cjipcc5dZYH$%s$extra", H64);
	expect_bad(v, "$");
	snprintf(v, sizeof(v), "$7$101$WOiI+Cjipcc5dZYH$ %s", H64);
	expect_bad(v, "hash");
	expect_bad("$6$", "$6$");
	expect_bad("$6$Bk6ucGF6AogCcMWn", "$6$");
	expect_bad("$6$Bk6ucGF6AogCcMWn$", "hash");
	snprintf(v, sizeof(v), "$6$$%s", H64);
	expect_bad(v, "salt");
	snprintf(v, sizeof(v), "$6$Bk6u\tcGF6AogCcMWn$%s", H64);
	expect_bad(v, "salt");
	// A salt past 256 bytes.
	memset(v, 'A', sizeof(v));
	memcpy(v, "$6$", 3);
	snprintf(v + 3 + 400, sizeof(v) - 403, "$%s", H64);
	expect_bad(v, "salt");
}

static void test_bad_members(void **state)
{
	(void)state;
	char              err[256];
	cJSON            *o = cJSON_Parse("{\"ok\": \"x\", \"num\": 12}");
	auth_password_db *db;

	db = auth_password_db_alloc(o, err, sizeof(err));
	assert_null(db);
	assert_non_null(strstr(err, "auth.password.num"));
	cJSON_Delete(o);

	o  = cJSON_Parse("[\"a\"]");
	db = auth_password_db_alloc(o, err, sizeof(err));
	assert_null(db);
	assert_non_null(strstr(err, "auth.password"));
	cJSON_Delete(o);

	o = cJSON_Parse("{\"\": \"x\"}");
	assert_null(auth_password_db_alloc(o, err, sizeof(err)));
	assert_non_null(strstr(err, "empty user name"));
	assert_null(auth_password_db_alloc(o, NULL, 0)); // err is optional
	cJSON_Delete(o);

	// Control characters in a user name are not echoed raw.
	o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "bad\nname\x1b", "$7$x");
	assert_null(auth_password_db_alloc(o, err, sizeof(err)));
	assert_non_null(strstr(err, "bad?name?"));
	assert_null(strchr(err, '\n'));
	cJSON_Delete(o);

	// A user name past 65535 bytes.
	char *longname = malloc(70000);
	memset(longname, 'u', 69999);
	longname[69999] = '\0';
	o               = cJSON_CreateObject();
	cJSON_AddStringToObject(o, longname, "x");
	assert_null(auth_password_db_alloc(o, err, sizeof(err)));
	assert_non_null(strstr(err, "65535"));
	assert_true(strlen(err) < 200);
	cJSON_Delete(o);
	// A plain-text password past 65535 bytes.
	o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "u", longname);
	assert_null(auth_password_db_alloc(o, err, sizeof(err)));
	assert_non_null(strstr(err, "65535"));
	cJSON_Delete(o);
	free(longname);

	// NULL: an empty database.
	db = auth_password_db_alloc(NULL, err, sizeof(err));
	assert_non_null(db);
	assert_int_equal(auth_password_db_count(db), 0);
	assert_int_equal(check(db, "a", "b"), AUTH_UNKNOWN_USER);
	auth_password_db_free(db);
}

static void test_duplicates_and_many(void **state)
{
	(void)state;
	cJSON            *o = cJSON_CreateObject();
	auth_password_db *db;
	char              name[32];
	char              pass[32];

	cJSON_AddStringToObject(o, "dup", "first");
	for (int i = 0; i < 500; i++) {
		snprintf(name, sizeof(name), "user%d", i);
		snprintf(pass, sizeof(pass), "pw%d", i * 7);
		cJSON_AddStringToObject(o, name, pass);
	}
	cJSON_AddStringToObject(o, "dup", "second");
	db = auth_password_db_alloc(o, NULL, 0);
	cJSON_Delete(o);
	assert_non_null(db);
	assert_int_equal(auth_password_db_count(db), 501);
	assert_int_equal(check(db, "dup", "second"), AUTH_OK);
	assert_int_equal(check(db, "dup", "first"), AUTH_BAD_PASSWORD);
	for (int i = 0; i < 500; i++) {
		snprintf(name, sizeof(name), "user%d", i);
		snprintf(pass, sizeof(pass), "pw%d", i * 7);
		assert_int_equal(check(db, name, pass), AUTH_OK);
		snprintf(pass, sizeof(pass), "pw%d", i * 7 + 1);
		assert_int_equal(check(db, name, pass), AUTH_BAD_PASSWORD);
	}
	assert_int_equal(check(db, "user500", "pw3500"), AUTH_UNKNOWN_USER);
	auth_password_db_free(db);
}

static void test_hash_new(void **state)
{
	(void)state;
	char              e1[AUTH_PBKDF2_ENTRY_MAX];
	char              e2[AUTH_PBKDF2_ENTRY_MAX];
	char              json[512];
	auth_password_db *db;

	assert_int_equal(auth_password_hash_new("s3cret", 6, e1, sizeof(e1)), 0);
	assert_int_equal(auth_password_hash_new("s3cret", 6, e2, sizeof(e2)), 0);
	// $7$101$<16 base64 chars: 12 bytes>$<88 chars: 64 bytes>
	assert_int_equal(strncmp(e1, "$7$101$", 7), 0);
	assert_int_equal(strlen(e1), 7 + 16 + 1 + 88);
	assert_int_equal(e1[7 + 16], '$');
	assert_string_not_equal(e1, e2); // fresh salt each time
	snprintf(json, sizeof(json), "{\"a\": \"%s\", \"b\": \"%s\"}", e1, e2);
	db = db_from(json);
	assert_int_equal(check(db, "a", "s3cret"), AUTH_OK);
	assert_int_equal(check(db, "b", "s3cret"), AUTH_OK);
	assert_int_equal(check(db, "a", "s3cre"), AUTH_BAD_PASSWORD);
	auth_password_db_free(db);

	assert_int_equal(auth_password_hash_new("", 0, e1, sizeof(e1)), 0);
	assert_int_equal(auth_password_hash_new(NULL, 0, e2, sizeof(e2)), 0);
	snprintf(json, sizeof(json), "{\"a\": \"%s\", \"b\": \"%s\"}", e1, e2);
	db = db_from(json);
	assert_int_equal(check(db, "a", ""), AUTH_OK);
	assert_int_equal(check(db, "b", ""), AUTH_OK);
	auth_password_db_free(db);

	assert_int_equal(auth_password_hash_new("x", 1, e1, AUTH_PBKDF2_ENTRY_MAX - 1), NMQ_EINVAL);
	assert_int_equal(auth_password_hash_new("x", 1, NULL, sizeof(e1)), NMQ_EINVAL);
	assert_int_equal(auth_password_hash_new(NULL, 3, e1, sizeof(e1)), NMQ_EINVAL);
	assert_int_equal(auth_password_hash_new("x", 70000, e1, sizeof(e1)), NMQ_EINVAL);
}

// The CONNECT decision for every combination of allow_anonymous and
// credentials.
static void test_connect_matrix(void **state)
{
	(void)state;
	char      err[256];
	cJSON    *pw = cJSON_Parse("{\"alice\": \"wonder\", \"bob\": \"" M7_USER "\"}");
	auth_ctx *ctx;

	ctx = auth_ctx_build(pw, NULL, ACL_ALLOW, err, sizeof(err));
	cJSON_Delete(pw);
	assert_non_null(ctx);

	struct {
		bool        anon;
		const char *user;
		const char *pass;
		uint8_t     rc;
	} cases[] = {
		{ true, NULL, NULL, 0 },
		{ true, "alice", "wonder", 0 },
		{ true, "bob", "pass", 0 },
		{ true, "alice", "wrong", AUTH_RC_BAD_USER_OR_PASSWORD },
		{ true, "bob", "wrong", AUTH_RC_BAD_USER_OR_PASSWORD },
		{ true, "alice", NULL, AUTH_RC_BAD_USER_OR_PASSWORD },
		{ true, "bob", NULL, AUTH_RC_BAD_USER_OR_PASSWORD },
		{ true, "carol", "anything", 0 },
		{ true, "carol", NULL, 0 },
		{ true, "", NULL, 0 },
		{ false, NULL, NULL, AUTH_RC_NOT_AUTHORIZED },
		{ false, "alice", "wonder", 0 },
		{ false, "bob", "pass", 0 },
		{ false, "alice", "wrong", AUTH_RC_BAD_USER_OR_PASSWORD },
		{ false, "bob", "wrong", AUTH_RC_BAD_USER_OR_PASSWORD },
		{ false, "alice", NULL, AUTH_RC_BAD_USER_OR_PASSWORD },
		{ false, "carol", "anything", AUTH_RC_BAD_USER_OR_PASSWORD },
		{ false, "carol", NULL, AUTH_RC_BAD_USER_OR_PASSWORD },
		{ false, "", "", AUTH_RC_BAD_USER_OR_PASSWORD },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *u  = cases[i].user;
		const char *p  = cases[i].pass;
		uint8_t     rc = auth_connect_check(
		        ctx, u, u != NULL ? strlen(u) : 0, p, p != NULL ? strlen(p) : 0, cases[i].anon);
		if (rc != cases[i].rc) {
			fail_msg("case %zu (anon %d, %s/%s): got 0x%02x, want 0x%02x", i,
			    cases[i].anon, u ? u : "-", p ? p : "-", rc, cases[i].rc);
		}
	}
	// No context at all: every user is unknown.
	assert_int_equal(auth_connect_check(NULL, "alice", 5, "wonder", 6, true), 0);
	assert_int_equal(
	    auth_connect_check(NULL, "alice", 5, "wonder", 6, false), AUTH_RC_BAD_USER_OR_PASSWORD);
	assert_int_equal(auth_connect_check(NULL, NULL, 0, NULL, 0, false), AUTH_RC_NOT_AUTHORIZED);
	auth_ctx_release(ctx);
}

static void test_ctx(void **state)
{
	(void)state;
	char      err[256];
	cJSON    *pw    = cJSON_Parse("{\"a\": \"$7$bad\"}");
	cJSON    *rules = cJSON_Parse("{\"rules\": [{\"permit\": \"maybe\"}]}");
	auth_ctx *ctx;

	assert_null(auth_ctx_build(pw, NULL, ACL_ALLOW, err, sizeof(err)));
	assert_non_null(strstr(err, "auth.password.a"));
	assert_null(auth_ctx_build(NULL, rules, ACL_ALLOW, err, sizeof(err)));
	assert_non_null(strstr(err, "auth.acl.rules[0]"));
	cJSON_Delete(pw);
	cJSON_Delete(rules);

	// No ACL: everything allowed whatever no_match says.
	ctx = auth_ctx_build(NULL, NULL, ACL_DENY, err, sizeof(err));
	assert_non_null(ctx);
	assert_non_null(auth_ctx_passwords(ctx));
	assert_null(auth_ctx_acl(ctx));
	acl_client who = { "c1", NULL, "10.0.0.1:1234" };
	assert_int_equal(acl_check(auth_ctx_acl(ctx), &who, ACL_PUBLISH, "a/b", 3), ACL_ALLOW);
	assert_ptr_equal(auth_ctx_hold(ctx), ctx);
	auth_ctx_release(ctx);
	auth_ctx_release(ctx);
	auth_ctx_release(NULL);
	assert_null(auth_ctx_hold(NULL));
	assert_null(auth_ctx_passwords(NULL));

	// From a loaded configuration.
	nmq_conf    conf;
	conf_errors errs;
	const char *text
	    = "auth {\n"
	      "  allow_anonymous = false\n"
	      "  no_match = deny\n"
	      "  password { admin: public, \"dev.1\": \"" M7_USER "\" }\n"
	      "  acl { rules = [ {permit: allow, username: admin, topics: [\"#\"]} ] }\n"
	      "}\n";
	if (conf_load_text(&conf, text, strlen(text), "t.conf", NULL, &errs) != 0) {
		fail_msg("%s", errs.n_errors > 0 ? errs.errors[0] : "conf_load_text failed");
	}
	conf_errors_free(&errs);
	ctx = auth_ctx_alloc(&conf, err, sizeof(err));
	if (ctx == NULL) {
		fail_msg("%s", err);
	}
	assert_int_equal(auth_connect_check(ctx, "admin", 5, "public", 6, conf.allow_anonymous), 0);
	assert_int_equal(auth_connect_check(ctx, "dev.1", 5, "pass", 4, conf.allow_anonymous), 0);
	assert_int_equal(auth_connect_check(ctx, "dev.1", 5, "public", 6, conf.allow_anonymous),
	    AUTH_RC_BAD_USER_OR_PASSWORD);
	conf_free(&conf);
	acl_client admin = { "c1", "admin", "10.0.0.1:1234" };
	acl_client other = { "c2", "other", "10.0.0.1:1234" };
	assert_int_equal(acl_check(auth_ctx_acl(ctx), &admin, ACL_PUBLISH, "x", 1), ACL_ALLOW);
	assert_int_equal(acl_check(auth_ctx_acl(ctx), &other, ACL_PUBLISH, "x", 1), ACL_DENY);
	auth_ctx_release(ctx);
}

// Returns the directory this source file lives in, two levels up (the
// repository root), in buf; or NULL when __FILE__ is not absolute.
static const char *repo_root(char *buf, size_t len)
{
	const char *f = __FILE__;
	const char *p = strstr(f, "/tests/unit/test_auth.c");

	if (f[0] != '/' || p == NULL || (size_t)(p - f) >= len) {
		return NULL;
	}
	memcpy(buf, f, (size_t)(p - f));
	buf[p - f] = '\0';
	return buf;
}

// Loads `auth.password = {include "path"}` and returns the context.
static auth_ctx *ctx_from_file(const char *path)
{
	char        text[1024];
	char        err[256];
	nmq_conf    conf;
	conf_errors errs;
	auth_ctx   *ctx;

	snprintf(text, sizeof(text), "auth.password = {include \"%s\"}\n", path);
	if (conf_load_text(&conf, text, strlen(text), "t.conf", NULL, &errs) != 0) {
		fail_msg("%s", errs.n_errors > 0 ? errs.errors[0] : "conf_load_text failed");
	}
	conf_errors_free(&errs);
	ctx = auth_ctx_alloc(&conf, err, sizeof(err));
	conf_free(&conf);
	if (ctx == NULL) {
		fail_msg("%s", err);
	}
	return ctx;
}

// Writes text to a new temporary file; returns its path in buf.
static void temp_file(char *buf, size_t len, const char *text)
{
	snprintf(buf, len, "/tmp/nmq_test_auth_XXXXXX");
	int fd = mkstemp(buf);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

// Returns the content of path (caller frees).
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long  n;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = calloc(1, (size_t)n + 1);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return buf;
}

// A file written by mosquitto_passwd, included unchanged.
static void test_mosquitto_file(void **state)
{
	(void)state;
	char      path[64];
	auth_ctx *ctx;

	temp_file(path, sizeof(path),
	    "user:" M7_USER "\nadmin:" M7_ADMIN "\nold:" M6_USER "\nplain: text\n");
	ctx = ctx_from_file(path);
	assert_int_equal(auth_password_db_count(auth_ctx_passwords(ctx)), 4);
	assert_int_equal(auth_connect_check(ctx, "user", 4, "pass", 4, false), 0);
	assert_int_equal(auth_connect_check(ctx, "admin", 5, "public", 6, false), 0);
	assert_int_equal(auth_connect_check(ctx, "old", 3, "pass", 4, false), 0);
	assert_int_equal(auth_connect_check(ctx, "plain", 5, "text", 4, false), 0);
	assert_int_equal(
	    auth_connect_check(ctx, "admin", 5, "pass", 4, false), AUTH_RC_BAD_USER_OR_PASSWORD);
	auth_ctx_release(ctx);
	unlink(path);

	// The shipped example file parses (everything in it is commented out).
	char root[512];
	char ex[600];
	if (repo_root(root, sizeof(root)) != NULL) {
		snprintf(ex, sizeof(ex), "%s/etc/nanomq_pwd.conf", root);
		ctx = ctx_from_file(ex);
		assert_int_equal(auth_password_db_count(auth_ctx_passwords(ctx)), 0);
		auth_ctx_release(ctx);
	}
}

// Runs auth_passwd_main with a NULL-terminated list of arguments.
static int passwd(const char *a, ...)
{
	char   *argv[16];
	int     argc = 0;
	va_list ap;

	argv[argc++] = "passwd";
	va_start(ap, a);
	for (const char *s = a; s != NULL && argc < 15; s = va_arg(ap, const char *)) {
		argv[argc++] = (char *)s;
	}
	va_end(ap);
	argv[argc] = NULL;
	return auth_passwd_main(argc, argv);
}

static void test_passwd_cmd(void **state)
{
	(void)state;
	char        path[64];
	char       *text;
	auth_ctx   *ctx;
	struct stat st;

	snprintf(path, sizeof(path), "/tmp/nmq_test_pwd_%d.conf", (int)getpid());
	unlink(path);
	// Without -c the file must exist.
	assert_int_equal(passwd("-b", path, "alice", "one", NULL), 1);
	assert_int_equal(passwd("-c", "-b", path, "alice", "one", NULL), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(passwd("-b", path, "bob", "two", NULL), 0);
	assert_int_equal(passwd("-b", path, "sensor.1", "three", NULL), 0);
	assert_int_equal(passwd("-b", path, "we\"ird\\", "four", NULL), 0);
	assert_int_equal(passwd("-b", path, "include", "five", NULL), 0);
	text = slurp(path);
	assert_non_null(strstr(text, "alice: \"$7$101$"));
	assert_non_null(strstr(text, "\"sensor.1\": \"$7$101$"));
	assert_non_null(strstr(text, "\"we\\\"ird\\\\\": \"$7$101$"));
	assert_null(strstr(text, "one")); // no plain text
	free(text);

	ctx = ctx_from_file(path);
	assert_int_equal(auth_password_db_count(auth_ctx_passwords(ctx)), 5);
	assert_int_equal(auth_connect_check(ctx, "alice", 5, "one", 3, false), 0);
	assert_int_equal(auth_connect_check(ctx, "bob", 3, "two", 3, false), 0);
	assert_int_equal(auth_connect_check(ctx, "sensor.1", 8, "three", 5, false), 0);
	assert_int_equal(auth_connect_check(ctx, "we\"ird\\", 7, "four", 4, false), 0);
	assert_int_equal(auth_connect_check(ctx, "include", 7, "five", 4, false), 0);
	auth_ctx_release(ctx);

	// Replace, keep other lines byte for byte, delete.
	assert_int_equal(passwd("-b", path, "bob", "TWO", NULL), 0);
	assert_int_equal(passwd("-b", path, "sensor.1", "THREE", NULL), 0);
	assert_int_equal(passwd("-D", path, "alice", NULL), 0);
	assert_int_equal(passwd("-D", path, "alice", NULL), 1); // gone already
	ctx = ctx_from_file(path);
	assert_int_equal(auth_password_db_count(auth_ctx_passwords(ctx)), 4);
	assert_int_equal(auth_connect_check(ctx, "alice", 5, "one", 3, true), 0); // unknown now
	assert_int_equal(
	    auth_connect_check(ctx, "alice", 5, "one", 3, false), AUTH_RC_BAD_USER_OR_PASSWORD);
	assert_int_equal(
	    auth_connect_check(ctx, "bob", 3, "two", 3, false), AUTH_RC_BAD_USER_OR_PASSWORD);
	assert_int_equal(auth_connect_check(ctx, "bob", 3, "TWO", 3, false), 0);
	assert_int_equal(auth_connect_check(ctx, "sensor.1", 8, "THREE", 5, false), 0);
	auth_ctx_release(ctx);
	unlink(path);

	// A hand-written file: comments, mosquitto lines, quoted keys, '=',
	// a nested key that is not the user, and duplicates.
	temp_file(path, sizeof(path),
	    "# users\n"
	    "user:" M7_USER "\n"
	    "  \"admin\" = public   # inline\n"
	    "admin.x: keep\n"
	    "\"ad\\u006din\": again\n"
	    "carol: c\n"
	    "no newline: at-end");
	chmod(path, 0640);
	assert_int_equal(passwd("-b", path, "admin", "newpw", NULL), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0640);
	text = slurp(path);
	assert_non_null(strstr(text, "# users\nuser:" M7_USER "\nadmin: \"$7$101$"));
	assert_non_null(strstr(text, "\nadmin.x: keep\ncarol: c\nno newline: at-end"));
	assert_null(strstr(text, "public"));
	assert_null(strstr(text, "again"));
	free(text);
	assert_int_equal(passwd("-b", path, "dave", "d", NULL), 0);
	text = slurp(path);
	assert_non_null(strstr(text, "no newline: at-end\ndave: \"$7$101$"));
	free(text);
	unlink(path);

	// Usage errors.
	assert_int_equal(passwd(NULL), 1);
	assert_int_equal(passwd("-b", "/tmp/x", "u", NULL), 1);
	assert_int_equal(passwd("-c", "-D", "/tmp/x", "u", NULL), 1);
	assert_int_equal(passwd("-x", "/tmp/x", "u", NULL), 1);
	assert_int_equal(passwd("-cb", path, "bad\nuser", "p", NULL), 1);
	assert_int_equal(passwd("-cb", path, "", "p", NULL), 1);
	assert_int_equal(passwd("-h", NULL), 0);
	assert_int_equal(access(path, F_OK), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ct_equal),
		cmocka_unit_test(test_plaintext),
		cmocka_unit_test(test_mosquitto_7),
		cmocka_unit_test(test_mosquitto_6),
		cmocka_unit_test(test_other_iterations),
		cmocka_unit_test(test_unpadded_base64),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_bad_members),
		cmocka_unit_test(test_duplicates_and_many),
		cmocka_unit_test(test_hash_new),
		cmocka_unit_test(test_connect_matrix),
		cmocka_unit_test(test_ctx),
		cmocka_unit_test(test_mosquitto_file),
		cmocka_unit_test(test_passwd_cmd),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
