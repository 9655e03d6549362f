// The authentication context and the CONNECT decision (see auth.h).
#include "src/auth/auth.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "src/conf/conf.h"

struct auth_ctx {
	atomic_int        refs;
	auth_password_db *passwords;
	acl              *acl; // NULL: no ACL configured
};

// Builds a context from the auth pieces. Returns it, or NULL with err set.
auth_ctx *auth_ctx_build(const struct cJSON *passwords, const struct cJSON *acl_tree, int no_match,
    char *err, size_t errlen)
{
	auth_ctx *ctx = calloc(1, sizeof(*ctx));

	if (ctx == NULL) {
		if (err != NULL && errlen > 0) {
			snprintf(err, errlen, "auth: out of memory");
		}
		return NULL;
	}
	atomic_init(&ctx->refs, 1);
	if ((ctx->passwords = auth_password_db_alloc(passwords, err, errlen)) == NULL) {
		goto fail;
	}
	if (acl_tree != NULL && (ctx->acl = acl_alloc(acl_tree, no_match, err, errlen)) == NULL) {
		goto fail;
	}
	return ctx;

fail:
	auth_password_db_free(ctx->passwords);
	free(ctx);
	return NULL;
}

// Builds a context from a loaded configuration. Returns it, or NULL with
// err set.
auth_ctx *auth_ctx_alloc(const struct nmq_conf *conf, char *err, size_t errlen)
{
	if (conf == NULL) {
		return auth_ctx_build(NULL, NULL, ACL_ALLOW, err, errlen);
	}
	return auth_ctx_build(conf->auth_password, conf->auth_acl,
	    conf->auth_no_match == CONF_ACL_DENY ? ACL_DENY : ACL_ALLOW, err, errlen);
}

// Takes a reference. Returns ctx.
auth_ctx *auth_ctx_hold(auth_ctx *ctx)
{
	if (ctx != NULL) {
		atomic_fetch_add(&ctx->refs, 1);
	}
	return ctx;
}

// Drops a reference, freeing the context with the last one.
void auth_ctx_release(auth_ctx *ctx)
{
	if (ctx == NULL || atomic_fetch_sub(&ctx->refs, 1) != 1) {
		return;
	}
	auth_password_db_free(ctx->passwords);
	acl_free(ctx->acl);
	free(ctx);
}

// Returns the password database.
const auth_password_db *auth_ctx_passwords(const auth_ctx *ctx)
{
	return ctx != NULL ? ctx->passwords : NULL;
}

// Returns the ACL, or NULL.
const acl *auth_ctx_acl(const auth_ctx *ctx)
{
	return ctx != NULL ? ctx->acl : NULL;
}

// Decides a CONNECT. Returns 0 or an MQTT 5 reason code.
uint8_t auth_connect_check(const auth_ctx *ctx, const char *user, size_t ulen, const char *pass,
    size_t plen, bool allow_anonymous)
{
	if (user == NULL) {
		return allow_anonymous ? 0 : AUTH_RC_NOT_AUTHORIZED;
	}
	switch (auth_password_check(auth_ctx_passwords(ctx), user, ulen, pass, plen)) {
	case AUTH_OK:
		return 0;
	case AUTH_UNKNOWN_USER:
		if (allow_anonymous) {
			return 0;
		}
		auth_password_dummy_check(pass, plen);
		return AUTH_RC_BAD_USER_OR_PASSWORD;
	default:
		return AUTH_RC_BAD_USER_OR_PASSWORD;
	}
}
