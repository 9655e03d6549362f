// Authentication of REST requests: HTTP Basic against the configured user
// name and password (compared in constant time), or an RS256 JSON Web
// Token in `Authorization: Bearer` verified with the configured public key
// (mbed TLS), whose `exp` claim, if present, must lie in the future.
//
// Threads: alloc/free on the main thread; http_auth_check on the HTTP
// server's thread (the key context is only read there).
#ifndef NMQ_HTTP_AUTH_H
#define NMQ_HTTP_AUTH_H

#include <stddef.h>

#include "src/http/http_parse.h"

typedef struct http_auth http_auth;

// kind is an enum http_auth_kind (http_server.h). For Basic without a user
// name or password every request is refused. For JWT, keyfile must hold a
// public RSA key in PEM. Returns NULL with a message in err on failure.
http_auth *http_auth_alloc(int kind, const char *username, const char *password,
    const char *keyfile, char *err, size_t errlen);
void       http_auth_free(http_auth *a);

// Checks the value of a request's Authorization header (NULL: none).
// Returns 0 when the request may proceed, otherwise the REST code to answer
// with HTTP 401: 104 (no or empty credentials), 103 (wrong credentials, a
// malformed or forged token), 116 (an expired token).
int http_auth_check(const http_auth *a, const http_str *authorization);

#endif // NMQ_HTTP_AUTH_H
