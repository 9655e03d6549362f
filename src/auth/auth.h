// Authentication and authorization state of the broker: the password
// database and the ACL built from one configuration, and the CONNECT
// decision (docs/compatibility.md §2).
//
// Contract:
// - An auth_ctx is built from a loaded configuration (main thread, at
//   start and on reload) and is immutable afterwards: any thread may use it
//   at once. It copies what it needs, so the nmq_conf may be freed.
// - It is reference counted: the builder holds one reference. A reload
//   builds a new context and swaps the broker's pointer under the broker's
//   own lock; a worker takes a reference (auth_ctx_hold) under that lock
//   before using the context outside it, and drops it afterwards
//   (auth_ctx_release). The last release frees it.
// - Reason codes are MQTT 5 (0x86, 0x87); the protocol layer maps them to
//   3.1.1 CONNACK codes (0x04, 0x05).
#ifndef NMQ_AUTH_AUTH_H
#define NMQ_AUTH_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/auth/acl.h"
#include "src/auth/password.h"

struct cJSON;
struct nmq_conf;

#define AUTH_RC_BAD_USER_OR_PASSWORD 0x86
#define AUTH_RC_NOT_AUTHORIZED       0x87

typedef struct auth_ctx auth_ctx;

// Builds a context from the pieces of the auth section: passwords is
// nmq_conf.auth_password (may be NULL), acl_tree nmq_conf.auth_acl (NULL:
// no ACL, every action allowed), no_match ACL_ALLOW or ACL_DENY. Returns the
// context with one reference, or NULL with a one-line reason in err (err
// may be NULL) when a password entry or an ACL rule is malformed or memory
// runs out.
auth_ctx *auth_ctx_build(const struct cJSON *passwords, const struct cJSON *acl_tree, int no_match,
    char *err, size_t errlen);

// Builds a context from a loaded configuration: auth_password, auth_acl
// and auth_no_match (CONF_ACL_DENY maps to ACL_DENY). Returns and fails as
// auth_ctx_build().
auth_ctx *auth_ctx_alloc(const struct nmq_conf *conf, char *err, size_t errlen);

// Takes one more reference. Returns ctx (NULL is allowed and returned).
auth_ctx *auth_ctx_hold(auth_ctx *ctx);

// Drops one reference; the last one frees the context. NULL is allowed.
void auth_ctx_release(auth_ctx *ctx);

// Returns the password database (never NULL for a built context; NULL
// for ctx NULL). Borrowed: valid while the caller holds a reference.
const auth_password_db *auth_ctx_passwords(const auth_ctx *ctx);

// Returns the ACL, or NULL when the configuration has none (acl_check()
// then allows everything). Borrowed like auth_ctx_passwords().
const acl *auth_ctx_acl(const auth_ctx *ctx);

// Decides a CONNECT. user and pass are byte strings of ulen / plen bytes,
// NULL when the client sent none. ctx NULL behaves as an empty password
// list. Returns 0 to accept, or:
// - AUTH_RC_NOT_AUTHORIZED (0x87): no user name and !allow_anonymous;
// - AUTH_RC_BAD_USER_OR_PASSWORD (0x86): a listed user with a wrong or
//   missing password (also when allow_anonymous), or an unlisted user when
//   !allow_anonymous.
// An unlisted user is accepted when allow_anonymous. Refusing an unlisted
// user costs about as much time as checking a listed one, so the answer
// time does not reveal which names exist. Thread-safe; takes up to a few
// tenths of a millisecond of CPU for a $7$ entry, never blocks on I/O.
uint8_t auth_connect_check(const auth_ctx *ctx, const char *user, size_t ulen, const char *pass,
    size_t plen, bool allow_anonymous);

#endif // NMQ_AUTH_AUTH_H
