// The password database: the `auth.password` list (user -> password or
// hash) turned into an immutable lookup table, and the password check the
// broker runs on CONNECT.
//
// Stored values (docs/compatibility.md §2, `auth`):
// - "$7$<iterations>$<base64 salt>$<base64 hash>": PBKDF2-HMAC-SHA512, the
//   format Mosquitto 2.x's mosquitto_passwd writes (101 iterations, a 12-byte
//   salt, a 64-byte derived key, standard base64 with '=' padding).
// - "$6$<base64 salt>$<base64 hash>": one SHA-512 over the password followed
//   by the salt, the format of Mosquitto 1.x.
// - anything else: the password itself, in plain text.
// A value that starts with "$7$" or "$6$" but is not well formed is an error
// when the database is built; it is never taken as plain text.
//
// Contract:
// - auth_password_db_alloc() copies what it needs from the cJSON tree: the
//   tree may be freed afterwards. The database is immutable once built, so
//   any number of threads may call auth_password_check() on it at once, and
//   a reload builds a new one and swaps a pointer.
// - Every comparison of secret material runs in constant time; plain-text
//   passwords are kept only as their SHA-512 digest, so that the comparison
//   also hides their length.
// - Nothing here logs or blocks on I/O. A $7$ check costs one PBKDF2 run
//   (about 0.1 ms at 101 iterations).
#ifndef NMQ_AUTH_PASSWORD_H
#define NMQ_AUTH_PASSWORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nng/core/nmq_err.h"

struct cJSON; // <cjson/cJSON.h>

// Iterations written into new $7$ entries: the default of Mosquitto 2.x's
// mosquitto_passwd, so that files stay interchangeable.
#define AUTH_PBKDF2_ITERATIONS 101
// Salt length, in bytes, of new $7$ entries (mosquitto_passwd uses 12).
#define AUTH_PBKDF2_SALT_LEN 12
// Length of a SHA-512 digest and of the PBKDF2 key stored in $7$ entries.
#define AUTH_HASH_LEN 64
// Bounds applied to stored entries: more iterations than this would let one
// entry stall every CONNECT of that user, and longer salts are not in use.
#define AUTH_MAX_ITERATIONS 1000000
#define AUTH_MAX_SALT_LEN   256
// MQTT strings are at most 65535 bytes: longer names and passwords in the
// list can never match, and are refused when the database is built.
#define AUTH_MAX_FIELD_LEN 65535
// Room for a "$7$101$<16>$<88>" entry and its NUL.
#define AUTH_PBKDF2_ENTRY_MAX 128

enum auth_result {
	AUTH_OK = 0, // known user, right password
	AUTH_BAD_PASSWORD, // known user, wrong or missing password
	AUTH_UNKNOWN_USER, // user not in the list
};

typedef struct auth_password_db auth_password_db;

// Builds a database from users, a cJSON object whose members are
// "user": "password-or-hash" strings (nmq_conf.auth_password). users may be
// NULL, which gives an empty database. If a user appears twice, the later
// value wins. Returns the database, or NULL with a one-line reason in err
// (naming the user, cut to a bounded length with control characters
// replaced) when a member is not a string, a name or value is too long, a
// hash entry is malformed, or memory runs out. err may be NULL.
auth_password_db *auth_password_db_alloc(const struct cJSON *users, char *err, size_t errlen);

// Frees the database and wipes the digests it held. NULL is allowed.
void auth_password_db_free(auth_password_db *db);

// Returns the number of distinct users in the database (0 for NULL).
size_t auth_password_db_count(const auth_password_db *db);

// Checks a user name and password (both byte strings, not NUL-terminated;
// pass NULL means the client sent no password). Returns AUTH_OK,
// AUTH_BAD_PASSWORD (known user, wrong password or no password), or
// AUTH_UNKNOWN_USER (db NULL, user NULL or not listed). Never fails
// otherwise: if the hash computation itself fails (out of memory inside
// mbedtls), the answer is AUTH_BAD_PASSWORD. Thread-safe.
int auth_password_check(
    const auth_password_db *db, const char *user, size_t ulen, const char *pass, size_t plen);

// Spends about the time of checking a default $7$ entry, and returns
// nothing: callers use it for unknown users, so that the time a refusal
// takes does not tell whether a user name exists.
void auth_password_dummy_check(const char *pass, size_t plen);

// Writes a new "$7$101$<salt>$<hash>" entry for pass (plen bytes) into out,
// NUL-terminated, with a fresh random salt from getrandom(2). Returns
// NMQ_OK; NMQ_EINVAL when out is NULL, outlen is below
// AUTH_PBKDF2_ENTRY_MAX, plen is above AUTH_MAX_FIELD_LEN or pass is NULL
// with plen > 0; NMQ_EIO when the random source or the hash fails.
nmq_err auth_password_hash_new(const char *pass, size_t plen, char *out, size_t outlen);

// Returns true when a and b (n bytes each) are equal. The time taken
// depends only on n, never on the contents.
bool auth_ct_equal(const void *a, const void *b, size_t n);

#endif // NMQ_AUTH_PASSWORD_H
