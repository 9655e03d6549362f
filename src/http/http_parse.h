// HTTP/1.1 message parsing: request and response heads, chunked bodies,
// percent-decoding and query strings.
//
// Pure functions over caller-owned bytes: nothing is allocated, nothing is
// copied (every http_str points into the caller's buffer), no global state,
// so any thread may call them. Every input is treated as hostile: the head
// is bounded by the caller's `max_head`, header count by HTTP_MAX_HEADERS,
// and every reject says which HTTP status to answer with.
//
// Used by the REST API server (src/http/http_server.c) and by HTTP clients
// (webhooks, HTTP authentication) for the replies they read.
#ifndef NMQ_HTTP_PARSE_H
#define NMQ_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP_MAX_HEADERS 64

// A byte range inside the parsed buffer (not NUL-terminated).
typedef struct http_str {
	const char *p;
	size_t      n;
} http_str;

typedef struct http_header {
	http_str name; // as sent (compare with http_str_ieq)
	http_str value; // leading and trailing spaces/tabs removed
} http_header;

// The outcome of a parse call.
typedef enum http_parse_rc {
	HTTP_PARSE_OK = 0, // a complete head (or body) was parsed
	HTTP_PARSE_INCOMPLETE, // not enough bytes yet: read more and call again
	HTTP_PARSE_ERROR, // malformed or over a limit: see `status`
} http_parse_rc;

typedef struct http_msg {
	// Request line (requests only).
	http_str method; // e.g. "GET"
	http_str target; // the request target as sent: path plus "?query"
	http_str path; // target up to '?', still percent-encoded
	http_str query; // after '?', still encoded; n == 0 if none
	// Status line (responses only).
	int      status; // 100..999
	http_str reason;
	// Both.
	int         version_minor; // 0 for HTTP/1.0, 1 for HTTP/1.1
	http_header headers[HTTP_MAX_HEADERS];
	size_t      nheaders;
	size_t      head_len; // bytes of the head, final empty line included
	int64_t     content_length; // -1 if there is no Content-Length header
	bool        chunked; // Transfer-Encoding: chunked
	bool        keep_alive; // by version and the Connection header
} http_msg;

// Parses the head of a request in buf[0..len). On HTTP_PARSE_OK, m is
// filled and m->head_len says where the body starts. On HTTP_PARSE_ERROR,
// *status is the status to answer with: 400 (malformed), 414 (request line
// longer than max_head), 431 (head longer than max_head or too many
// headers), 501 (a transfer coding other than chunked), 505 (not HTTP/1.x).
// A head longer than max_head is an error even while incomplete, so a
// client cannot make the caller buffer more than max_head bytes.
// Conflicting framing (both Content-Length and chunked, two different
// Content-Length values, a negative or non-numeric length) is 400.
http_parse_rc http_parse_request(
    const char *buf, size_t len, size_t max_head, http_msg *m, int *status);

// Parses the head of a response, with the same rules and limits (a reject
// sets *status to 502, meaning "bad upstream reply").
http_parse_rc http_parse_response(
    const char *buf, size_t len, size_t max_head, http_msg *m, int *status);

// Decodes a chunked body in place. buf[0..len) holds the bytes after the
// head. On HTTP_PARSE_OK the decoded body is buf[0..*body_len) and
// *consumed is the number of input bytes the chunked encoding used (the
// final chunk and trailers included). A decoded body longer than max_body
// is HTTP_PARSE_ERROR, as is any malformed chunk size or framing.
// HTTP_PARSE_INCOMPLETE leaves buf unchanged.
http_parse_rc http_chunked_decode(
    char *buf, size_t len, size_t max_body, size_t *body_len, size_t *consumed);

// The value of the first header called `name` (case-insensitive), or NULL.
const http_str *http_msg_header(const http_msg *m, const char *name);

// True if s equals the NUL-terminated lit, ignoring ASCII case.
bool http_str_ieq(http_str s, const char *lit);
// True if s equals lit exactly.
bool http_str_eq(http_str s, const char *lit);

// Percent-decodes in[0..n) into out (capacity cap; the result is
// NUL-terminated). With plus_space, '+' becomes ' ' (query strings).
// Returns the decoded length, or -1 if a '%' is not followed by two hex
// digits, if a byte is or decodes to NUL, or if the result does not fit in
// cap - 1 bytes.
long http_pct_decode(const char *in, size_t n, char *out, size_t cap, bool plus_space);

// Iterates the pairs of a query string `a=1&b=2`: starting at *pos (0 for
// the first call), stores the next raw (still encoded) key and value and
// advances *pos. Empty pairs are skipped; a pair without '=' has an empty
// value. Returns false when there are no more pairs.
bool http_query_next(http_str query, size_t *pos, http_str *key, http_str *value);

// Finds `key` in a query string and percent-decodes its value into out.
// Returns 1 if found, 0 if absent, -1 if the key or value is badly
// encoded or too long for out (the caller answers 400).
int http_query_get(http_str query, const char *key, char *out, size_t cap);

#endif // NMQ_HTTP_PARSE_H
