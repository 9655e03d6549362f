// libFuzzer target for the HTTP message parser (src/http/http_parse.c).
//
// 1. The input as a request head with a small and a large head limit: the
//    result is one of the three; a reject has a known status; an accepted
//    head lies within the input and the limit, every http_str points inside
//    the input, and the same head is accepted with the same head length
//    when split off from what follows; every prefix shorter than the head
//    is incomplete or (only if a byte already seen is bad) an error.
// 2. The same input as a response head.
// 3. The input as a chunked body: the decoded length never exceeds the
//    input, the limit holds, and an incomplete result leaves the bytes
//    unchanged.
// 4. Percent-decoding and query iteration over the input never write past
//    the output and never read past the input (ASan checks the reads).

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/http/http_parse.h"

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_http: check failed: %s (%s:%d)\n", #cond, __FILE__,  \
			    __LINE__);                                                             \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

static bool inside(http_str s, const char *buf, size_t len)
{
	return s.n == 0 || (s.p >= buf && s.p + s.n <= buf + len);
}

static void check_msg(const http_msg *m, const char *buf, size_t len, size_t max)
{
	CHECK(m->head_len > 0 && m->head_len <= len && m->head_len <= max);
	CHECK(m->nheaders <= HTTP_MAX_HEADERS);
	CHECK(inside(m->method, buf, m->head_len) && inside(m->target, buf, m->head_len));
	CHECK(inside(m->path, buf, m->head_len) && inside(m->query, buf, m->head_len));
	CHECK(inside(m->reason, buf, m->head_len));
	for (size_t i = 0; i < m->nheaders; i++) {
		CHECK(m->headers[i].name.n > 0);
		CHECK(inside(m->headers[i].name, buf, m->head_len));
		CHECK(inside(m->headers[i].value, buf, m->head_len));
	}
	CHECK(!(m->chunked && m->content_length >= 0));
}

static void one_head(const char *buf, size_t len, size_t max, bool request)
{
	http_msg     *m = malloc(sizeof(*m));
	int           st;
	http_parse_rc rc = request ? http_parse_request(buf, len, max, m, &st)
	                           : http_parse_response(buf, len, max, m, &st);
	CHECK(rc == HTTP_PARSE_OK || rc == HTTP_PARSE_INCOMPLETE || rc == HTTP_PARSE_ERROR);
	if (rc == HTTP_PARSE_ERROR) {
		if (request) {
			CHECK(st == 400 || st == 414 || st == 431 || st == 501 || st == 505);
		} else {
			CHECK(st == 502);
		}
	}
	if (rc == HTTP_PARSE_INCOMPLETE) {
		CHECK(len < max);
	}
	if (rc == HTTP_PARSE_OK) {
		check_msg(m, buf, len, max);
		size_t    head = m->head_len;
		http_msg *m2   = malloc(sizeof(*m2));
		// Exactly the head: the same result.
		http_parse_rc rc2 = request ? http_parse_request(buf, head, max, m2, &st)
		                            : http_parse_response(buf, head, max, m2, &st);
		CHECK(rc2 == HTTP_PARSE_OK && m2->head_len == head && m2->nheaders == m->nheaders);
		// A prefix: never OK.
		size_t cut = head / 2;
		rc2        = request ? http_parse_request(buf, cut, max, m2, &st)
		                     : http_parse_response(buf, cut, max, m2, &st);
		CHECK(rc2 != HTTP_PARSE_OK || head > cut);
		free(m2);
	}
	free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1);
	if (buf == NULL) {
		return 0;
	}
	memcpy(buf, data, size);
	const char *in = buf;

	one_head(in, size, 64, true);
	one_head(in, size, 8192, true);
	one_head(in, size, 64, false);
	one_head(in, size, 8192, false);

	// Chunked body.
	char  *copy = malloc(size + 1);
	size_t body = 0, used = 0;
	memcpy(copy, data, size);
	http_parse_rc rc = http_chunked_decode(copy, size, 1000, &body, &used);
	if (rc == HTTP_PARSE_OK) {
		CHECK(body <= 1000 && used <= size && body <= used);
	} else if (rc == HTTP_PARSE_INCOMPLETE) {
		CHECK(size == 0 || memcmp(copy, data, size) == 0);
	}
	free(copy);

	// Percent-decoding and the query string.
	char out[32];
	long n = http_pct_decode(in, size, out, sizeof(out), true);
	CHECK(n >= -1 && n < (long)sizeof(out));
	if (n >= 0) {
		CHECK(out[n] == '\0' && strlen(out) == (size_t)n);
	}
	http_str q   = { in, size };
	size_t   pos = 0, prev = 0;
	http_str k, v;
	while (http_query_next(q, &pos, &k, &v)) {
		CHECK(pos > prev && pos <= size);
		CHECK(inside(k, in, size) && inside(v, in, size));
		prev = pos;
	}
	(void)http_query_get(q, "clientid", out, sizeof(out));
	free(buf);
	return 0;
}
