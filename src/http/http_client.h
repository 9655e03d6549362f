// A small HTTP/1.1 client for the broker's outbound callouts (webhooks,
// HTTP authentication): URL parsing, a pool of request slots driven by the
// caller's poll() loop, TLS through mbed TLS, and answers read with
// http_parse.c.
//
// Threads: http_url_* and http_client_tls_init run at startup on the
// starting thread. http_slot_* and http_client_poll_* run on the one thread
// that owns the client's slots; the client's configuration is read-only
// after startup.
//
// Ownership: the caller owns the http_client, its slots and the requests;
// a slot points at the request bytes and the caller's item until the done
// callback (or http_slot_close) hands them back.
#ifndef NMQ_HTTP_CLIENT_H
#define NMQ_HTTP_CLIENT_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include "nng/core/nmq_err.h"

#define HTTP_CLIENT_HEAD_MAX     8192 // largest answer head read
#define HTTP_CLIENT_KEEP_IDLE_MS 30000 // a kept connection unused this long is closed

// A parsed target URL: http://host[:port][/path[?query]] or https://...
typedef struct http_url {
	bool                    https;
	char                    hostport[300]; // host[:port] as written (logs)
	char                    host[256]; // without brackets or port (SNI, lookup)
	char                    port[8]; // "80" or "443" unless given
	char                   *path; // path and query; "/" when none (owned)
	struct sockaddr_storage addr; // set by http_url_resolve
	socklen_t               addrlen;
} http_url;

// Parses url into u (no lookup). key names the configuration key in err.
// Fails with NMQ_EINVAL (not http:// or https://, empty or too long host,
// unclosed '[') or NMQ_ENOMEM. On failure u holds nothing to free.
nmq_err http_url_parse(const char *url, const char *key, http_url *u, char *err, size_t errlen);

// Resolves u->host and u->port into u->addr (blocking getaddrinfo, at
// startup). Fails with NMQ_EINVAL.
nmq_err http_url_resolve(http_url *u, const char *key, char *err, size_t errlen);

// Frees what http_url_parse allocated; u may be zeroed or half built.
void http_url_fini(http_url *u);

// The end of one request. answered: a whole answer head was read and
// status is its HTTP status; otherwise why names the failure ("socket",
// "connect", "connect_timeout", "timeout", "tls_setup", "tls_handshake",
// "tls_write", "send", "recv", "closed", "response_head_too_long",
// "bad_response") and status is 0, or for "bad_response" the status the
// parser saw, if any. The slot is idle again when it is called.
typedef void (*http_client_done)(void *arg, void *item, bool answered, int status, const char *why);

// TLS settings of an https target.
typedef struct http_tls_opts {
	const char *key; // the configuration key in messages ("webhook.ssl")
	bool        verify_peer;
	const char *cafile; // with verify_peer
	const char *certfile; // NULL: no client certificate
	const char *keyfile;
	const char *key_password;
	const char *pers; // random generator personalisation
} http_tls_opts;

typedef struct http_client {
	http_url url;
	uint32_t timeout_ms; // the whole exchange
	uint32_t connect_timeout_ms; // 0: timeout_ms bounds connect too
	// Keep-alive (opt-in): after an answer whose framing is known
	// (Content-Length, HTTP/1.1, no "Connection: close") the slot keeps
	// its connection, and the next request on it goes out there. A kept
	// connection found closed, or that fails before any answer byte, is
	// replaced by a fresh one for the same request (not a failure). Kept
	// connections idle for HTTP_CLIENT_KEEP_IDLE_MS are closed. The
	// requests must not say "Connection: close".
	bool keep_alive;
	// A fresh connection looks the host name up again (blocking, on the
	// slots' thread) when the last lookup is older than this, or when
	// the last connection attempt failed, at most once a second; 0: the
	// address resolved at startup is kept.
	uint32_t         reresolve_ms;
	uint64_t         resolved_ms; // when the address was last looked up
	bool             connect_failed; // the last connection attempt failed
	const char      *log_mod; // the log module of tls_failed lines
	http_client_done done;
	void            *arg;

	// https targets: one client configuration for every request.
	bool                     tls_ready; // the contexts below are initialised
	uint8_t                  ip[16]; // the host as an address, if it is one
	size_t                   ip_len; // 4, 16, or 0 (a name)
	mbedtls_ssl_config       tls_conf;
	mbedtls_x509_crt         tls_ca, tls_cert;
	mbedtls_pk_context       tls_key;
	mbedtls_entropy_context  tls_entropy;
	mbedtls_ctr_drbg_context tls_drbg;
} http_client;

typedef struct http_slot {
	int                 fd; // >= 0 while idle: a kept connection
	int                 state;
	bool                reused; // this request went out on a kept connection
	bool                head_done; // the answer head is in; its body is read
	int                 status; // of that head
	int64_t             body_left; // bytes of its body still to read
	uint64_t            idle_ms; // when a kept connection became idle
	short               want; // poll events the next step waits for
	bool                tls; // ssl is set up
	mbedtls_ssl_context ssl;
	void               *item; // the caller's, NULL when idle
	const char         *req;
	size_t              req_len;
	size_t              off; // bytes of req sent
	size_t              in_len;
	uint64_t            deadline_ms; // of the current step
	uint64_t            end_ms; // of the whole exchange
	char                in[HTTP_CLIENT_HEAD_MAX];
} http_slot;

// Sets up c's TLS configuration (c->url must be parsed). Fails with
// NMQ_ETLS, err naming o->key and the file or step.
nmq_err http_client_tls_init(http_client *c, const http_tls_opts *o, char *err, size_t errlen);

// Frees c's URL and TLS configuration (not c).
void http_client_fini(http_client *c);

// Monotonic milliseconds.
uint64_t http_client_now_ms(void);

void http_slot_init(http_slot *s);
bool http_slot_idle(const http_slot *s);
// Idle with a kept connection (keep_alive): the cheapest slot to use next.
bool http_slot_kept(const http_slot *s);

// Starts sending req (kept by the caller until done) for item on the idle
// slot s; a failure to start calls c->done at once.
void http_slot_start(http_client *c, http_slot *s, void *item, const char *req, size_t len);

// Ends s without calling done and returns its item (NULL when idle); a
// kept connection is closed too.
void *http_slot_close(http_slot *s);

// Ends the busy slots whose deadline passed (done: "connect_timeout" or
// "timeout"; answered with the status if the head was in and only the body
// was late), closes kept connections idle for HTTP_CLIENT_KEEP_IDLE_MS,
// appends a pollfd for each other busy slot to pfd[*n] (its
// index to map[*n]) and lowers *timeout_ms to the nearest deadline.
void http_client_poll_prepare(http_client *c, http_slot *slots, uint32_t count, uint64_t now,
    struct pollfd *pfd, int *map, int *n, int *timeout_ms);

// Advances the busy slot s after poll() reported events on it.
void http_slot_io(http_client *c, http_slot *s);

// After poll() returned r over the n entries that http_client_poll_prepare
// filled (map[i] < 0 marks the caller's wake-up eventfd, which is drained):
// advances every slot that has events.
void http_client_poll_dispatch(
    http_client *c, http_slot *slots, const struct pollfd *pfd, const int *map, int n, int r);

#endif // NMQ_HTTP_CLIENT_H
