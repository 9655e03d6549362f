// The HTTP/1.1 server of the REST API: one thread of its own with an epoll
// loop (docs/decisions/0017-http-server.md), keep-alive, Basic or RS256 JWT
// authentication, and bounds on everything a client controls: head size,
// body size, connections at once, and the time a request may take.
//
// Threads: http_server_alloc, http_server_route and http_server_free run on
// the main thread; handlers run on the server's thread, one request at a
// time, and must not block for long (no network wait; a small file write
// is fine). The server never runs on, or waits for, an MQTT worker.
#ifndef NMQ_HTTP_SERVER_H
#define NMQ_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nng/core/nmq_err.h"
#include "src/http/http_parse.h"

struct cJSON;
struct tls_pem_spec;

typedef struct http_server http_server;

// Most `:name` parameters in one route pattern.
#define HTTP_MAX_PARAMS 4

// A request as a handler sees it; valid during the handler call only.
typedef struct http_req {
	const http_msg *msg;
	const char     *path; // percent-decoded path
	http_str        query; // raw query string (http_query_get decodes)
	const char     *body; // NUL-terminated copy of the body ("" if none)
	size_t          body_len;
	const char     *params[HTTP_MAX_PARAMS]; // decoded `:name` segments, in order
	size_t          nparams;
} http_req;

// The reply a handler builds. The body grows as needed; on memory
// exhaustion the server answers 500 instead.
typedef struct http_resp {
	int         status;
	const char *content_type;
	char       *body;
	size_t      len;
	size_t      cap;
	bool        oom;
	bool        close; // close the connection after the reply
	// Runs on the server's thread after the reply was sent (or failed):
	// for /ctrl/stop and /ctrl/restart, which act after answering.
	void (*after)(void *arg);
	void *after_arg;
} http_resp;

typedef void (*http_handler)(void *arg, const http_req *req, http_resp *resp);

enum http_auth_kind { HTTP_AUTH_BASIC = 0, HTTP_AUTH_JWT, HTTP_AUTH_NONE };

typedef struct http_server_opts {
	const char *ip_addr; // "0.0.0.0" if NULL
	int         port;
	int         limit_conn; // connections at once; stalled ones (idle, slow head) make room
	uint32_t    max_body; // bytes
	uint32_t    max_head; // bytes of request line and headers (0: 16 KiB)
	uint32_t    request_timeout_ms; // a request must arrive within (0: 10 s)
	uint32_t    idle_timeout_ms; // an idle keep-alive connection (0: 60 s)
	int         auth; // enum http_auth_kind
	const char *username; // Basic; NULL: every request is refused
	const char *password;
	const char *jwt_keyfile; // RS256 public key (PEM) for HTTP_AUTH_JWT
	// HTTPS: the server's files (borrowed for http_server_alloc); NULL
	// serves plain HTTP. A TLS handshake must finish within
	// request_timeout_ms; a plain HTTP request gets a clear-text 400.
	const struct tls_pem_spec *tls;
} http_server_opts;

// Creates the server and binds its socket (so that a taken port fails the
// startup). Nothing is served until http_server_start. Returns NULL with a
// message in err on failure.
http_server *http_server_alloc(const http_server_opts *o, char *err, size_t errlen);
// Adds a route: method ("GET", "POST", ...) and a pattern of '/'-separated
// segments where `:name` matches one non-empty segment (decoded into
// req->params). Routes are tried in the order added; the first match
// wins. Call before http_server_start. Returns NMQ_OK, NMQ_ENOMEM, or
// NMQ_EINVAL for a pattern with too many parameters.
nmq_err http_server_route(
    http_server *hs, const char *method, const char *pattern, http_handler fn, void *arg);
// Starts the server's thread. Returns NMQ_OK or an error.
nmq_err http_server_start(http_server *hs);
// The port actually bound (useful with port 0).
int http_server_port(const http_server *hs);

// Connections closed at limit_conn to make room for a waiting client:
// closed_slow were still sending their request head or TLS handshake,
// closed_idle were kept alive idle between requests (each after more than
// a second of no progress). Call on the server's thread (from a handler).
typedef struct http_server_stats {
	uint64_t closed_slow;
	uint64_t closed_idle;
} http_server_stats;
void http_server_stats_get(const http_server *hs, http_server_stats *st);
// Stops the thread, closes every connection and frees the server.
void http_server_free(http_server *hs);

// ---- Building replies (handler side).

// Appends raw bytes to the body.
void http_resp_append(http_resp *r, const char *s, size_t n);
void http_resp_printf(http_resp *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Sets the status and a JSON body: json is printed and deleted.
void http_resp_json(http_resp *r, int status, struct cJSON *json);
// An error reply: {"code":code,"message":message}.
void http_resp_error(http_resp *r, int status, int code, const char *message);

// REST result codes (the `code` member of every JSON reply).
enum {
	REST_OK                = 0,
	REST_RPC_ERROR         = 101,
	REST_UNKNOWN_ERROR     = 102,
	REST_WRONG_CREDENTIALS = 103,
	REST_EMPTY_CREDENTIALS = 104,
	REST_MISSING_PARAM     = 107,
	REST_PARAM_ERROR       = 108,
	REST_BAD_JSON          = 109,
	REST_CLIENT_OFFLINE    = 112,
	REST_ILLEGAL_TOPIC     = 115,
	REST_TOKEN_EXPIRED     = 116,
	REST_BAD_HOCON         = 117,
	REST_WRITE_FAILED      = 118,
};

#endif // NMQ_HTTP_SERVER_H
