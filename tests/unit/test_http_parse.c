// Unit tests of the HTTP message parser (src/http/http_parse.c): accepted
// requests and responses, every reject with its status, heads split at
// every byte, the head-size limit while incomplete, chunked bodies,
// percent-decoding and query strings.

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "src/http/http_parse.h"

static http_parse_rc req(const char *s, int *status, http_msg *m)
{
	return http_parse_request(s, strlen(s), 8192, m, status);
}

static void expect_reject(const char *s, int want)
{
	http_msg m;
	int      st = -1;
	if (req(s, &st, &m) != HTTP_PARSE_ERROR || st != want) {
		fail_msg("request %s: status %d, want a reject with %d", s, st, want);
	}
}

static void test_request_ok(void **state)
{
	(void)state;
	const char *s = "GET /api/v4/clients?_page=2&clientid=a%2Fb HTTP/1.1\r\n"
	                "Host: x\r\nAuthorization:  Basic YTpi \t\r\nContent-Length: 3\r\n\r\nabc";
	http_msg    m;
	int         st;
	assert_int_equal(req(s, &st, &m), HTTP_PARSE_OK);
	assert_true(http_str_eq(m.method, "GET"));
	assert_true(http_str_eq(m.path, "/api/v4/clients"));
	assert_true(http_str_eq(m.query, "_page=2&clientid=a%2Fb"));
	assert_int_equal(m.version_minor, 1);
	assert_true(m.keep_alive);
	assert_int_equal(m.content_length, 3);
	assert_int_equal(m.nheaders, 3);
	assert_int_equal(m.head_len, strlen(s) - 3);
	const http_str *a = http_msg_header(&m, "AUTHORIZATION");
	assert_non_null(a);
	assert_true(http_str_eq(*a, "Basic YTpi"));
	char v[32];
	assert_int_equal(http_query_get(m.query, "clientid", v, sizeof(v)), 1);
	assert_string_equal(v, "a/b");
	assert_int_equal(http_query_get(m.query, "_page", v, sizeof(v)), 1);
	assert_string_equal(v, "2");
	assert_int_equal(http_query_get(m.query, "username", v, sizeof(v)), 0);
}

static void test_request_keepalive(void **state)
{
	(void)state;
	http_msg m;
	int      st;
	assert_int_equal(req("GET / HTTP/1.0\r\n\r\n", &st, &m), HTTP_PARSE_OK);
	assert_false(m.keep_alive);
	assert_int_equal(m.content_length, -1);
	assert_int_equal(
	    req("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &st, &m), HTTP_PARSE_OK);
	assert_true(m.keep_alive);
	assert_int_equal(req("GET / HTTP/1.1\r\nHost: a\r\nConnection: te, close\r\n\r\n", &st, &m),
	    HTTP_PARSE_OK);
	assert_false(m.keep_alive);
	// Bare LF line ends and one leading empty line are accepted.
	assert_int_equal(req("\r\nPOST /x HTTP/1.1\nHost: a\n\n", &st, &m), HTTP_PARSE_OK);
	assert_true(http_str_eq(m.method, "POST"));
	assert_int_equal(
	    req("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n", &st, &m),
	    HTTP_PARSE_OK);
	assert_true(m.chunked);
}

static void test_request_rejects(void **state)
{
	(void)state;
	expect_reject("GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
	expect_reject("GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400);
	expect_reject("GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 400);
	expect_reject("GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400);
	expect_reject("G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
	expect_reject("GET / HTTX/1.1\r\nHost: a\r\n\r\n", 400);
	expect_reject("GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505);
	expect_reject("GET / HTTP/1.1\r\n\r\n", 400); // no Host
	expect_reject("GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400);
	expect_reject("GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400);
	expect_reject("GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n", 400);
	expect_reject("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400);
	expect_reject("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400);
	expect_reject("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n", 400);
	expect_reject(
	    "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", 400);
	expect_reject(
	    "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400);
	expect_reject(
	    "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
	    400);
	expect_reject("GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501);
	expect_reject(
	    "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked"
	    "\r\n\r\n",
	    501);
	// The same Content-Length twice is fine.
	http_msg m;
	int      st;
	assert_int_equal(
	    req("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\n", &st,
	        &m),
	    HTTP_PARSE_OK);
	assert_int_equal(m.content_length, 2);
	// A bad method byte is seen before the line is complete.
	assert_int_equal(http_parse_request("GE{", 3, 8192, &m, &st), HTTP_PARSE_ERROR);
}

static void test_request_limits(void **state)
{
	(void)state;
	static char buf[20000];
	http_msg    m;
	int         st;
	// A request line longer than the limit, incomplete: 414 at once.
	memset(buf, 'a', sizeof(buf));
	memcpy(buf, "GET /", 5);
	assert_int_equal(http_parse_request(buf, 1024, 1024, &m, &st), HTTP_PARSE_ERROR);
	assert_int_equal(st, 414);
	// Headers that never end: 431 once the limit is reached, incomplete before.
	size_t n = (size_t)snprintf(buf, sizeof(buf), "GET / HTTP/1.1\r\nHost: a\r\n");
	while (n + 10 < 3000) {
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, "X-A: bbb\r\n");
	}
	assert_int_equal(http_parse_request(buf, n, 4096, &m, &st), HTTP_PARSE_INCOMPLETE);
	assert_int_equal(http_parse_request(buf, n, 2048, &m, &st), HTTP_PARSE_ERROR);
	assert_int_equal(st, 431);
	// Too many headers.
	n = (size_t)snprintf(buf, sizeof(buf), "GET / HTTP/1.1\r\nHost: a\r\n");
	for (int i = 0; i < HTTP_MAX_HEADERS; i++) {
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, "X-%d: b\r\n", i);
	}
	n += (size_t)snprintf(buf + n, sizeof(buf) - n, "\r\n");
	assert_int_equal(http_parse_request(buf, n, sizeof(buf), &m, &st), HTTP_PARSE_ERROR);
	assert_int_equal(st, 431);
}

// Every prefix of a valid request is incomplete; the whole is OK.
static void test_request_split(void **state)
{
	(void)state;
	const char *s
	    = "POST /api/v4/mqtt/publish HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n";
	size_t   n = strlen(s);
	http_msg m;
	int      st;
	for (size_t i = 0; i < n; i++) {
		if (http_parse_request(s, i, 8192, &m, &st) != HTTP_PARSE_INCOMPLETE) {
			fail_msg("prefix of %zu bytes is not incomplete", i);
		}
	}
	assert_int_equal(http_parse_request(s, n, 8192, &m, &st), HTTP_PARSE_OK);
	assert_int_equal(m.head_len, n);
}

static void test_response(void **state)
{
	(void)state;
	const char *s = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
	                "Content-Length: 2\r\n\r\n{}";
	http_msg    m;
	int         st;
	assert_int_equal(http_parse_response(s, strlen(s), 8192, &m, &st), HTTP_PARSE_OK);
	assert_int_equal(m.status, 200);
	assert_true(http_str_eq(m.reason, "OK"));
	assert_int_equal(m.content_length, 2);
	assert_int_equal(m.head_len, strlen(s) - 2);
	for (size_t i = 0; i < strlen(s) - 2; i++) {
		assert_int_equal(http_parse_response(s, i, 8192, &m, &st), HTTP_PARSE_INCOMPLETE);
	}
	s = "HTTP/1.0 204\r\n\r\n";
	assert_int_equal(http_parse_response(s, strlen(s), 8192, &m, &st), HTTP_PARSE_OK);
	assert_int_equal(m.status, 204);
	assert_false(m.keep_alive);
	const char *bad[] = { "HTTP/1.1 20 OK\r\n\r\n", "HTTP/1.1 099 X\r\n\r\n",
		"HTTP/1.1 200OK\r\n\r\n", "HTTP/2 200 OK\r\n\r\n", "SSH-2.0-x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nA b: c\r\n\r\n", "HTTP/1.1 200 O\x01K\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: br\r\n\r\n" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		st = 0;
		if (http_parse_response(bad[i], strlen(bad[i]), 8192, &m, &st) != HTTP_PARSE_ERROR
		    || st != 502) {
			fail_msg("response %zu accepted", i);
		}
	}
	// Not HTTP at all is seen at once.
	assert_int_equal(http_parse_response("SSH", 3, 8192, &m, &st), HTTP_PARSE_ERROR);
}

static void test_chunked(void **state)
{
	(void)state;
	char        buf[128];
	const char *s = "4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\n"
	                "Trailer: x\r\n\r\nNEXT";
	size_t      n = strlen(s);
	size_t      body, used;
	for (size_t i = 0; i < n - 4; i++) {
		memcpy(buf, s, n);
		if (http_chunked_decode(buf, i, 1000, &body, &used) != HTTP_PARSE_INCOMPLETE) {
			fail_msg("prefix of %zu bytes is not incomplete", i);
		}
		assert_memory_equal(buf, s, n); // untouched
	}
	memcpy(buf, s, n);
	assert_int_equal(http_chunked_decode(buf, n, 1000, &body, &used), HTTP_PARSE_OK);
	assert_int_equal(body, 23);
	assert_memory_equal(buf, "Wikipedia in\r\n\r\nchunks.", 23);
	assert_int_equal(used, n - 4);
	// Over the body limit.
	memcpy(buf, s, n);
	assert_int_equal(http_chunked_decode(buf, n, 22, &body, &used), HTTP_PARSE_ERROR);
	const char *bad[] = { "x\r\n", "4\r\nWikiX\r\n0\r\n\r\n", "4x\r\nWiki\r\n0\r\n\r\n",
		"1000000000000000\r\n", "-1\r\n" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memcpy(buf, bad[i], strlen(bad[i]));
		if (http_chunked_decode(buf, strlen(bad[i]), 1000, &body, &used)
		    != HTTP_PARSE_ERROR) {
			fail_msg("chunked %zu accepted", i);
		}
	}
}

static void test_pct_decode(void **state)
{
	(void)state;
	char out[16];
	assert_int_equal(http_pct_decode("a%2Fb%41+c", 10, out, sizeof(out), true), 6);
	assert_string_equal(out, "a/bA c");
	assert_int_equal(http_pct_decode("a+b", 3, out, sizeof(out), false), 3);
	assert_string_equal(out, "a+b");
	assert_int_equal(http_pct_decode("%", 1, out, sizeof(out), false), -1);
	assert_int_equal(http_pct_decode("%4", 2, out, sizeof(out), false), -1);
	assert_int_equal(http_pct_decode("%G0", 3, out, sizeof(out), false), -1);
	assert_int_equal(http_pct_decode("%0g", 3, out, sizeof(out), false), -1);
	assert_int_equal(http_pct_decode("%00", 3, out, sizeof(out), false), -1);
	// "%4" at the very end must not read past n (the buffer holds more).
	assert_int_equal(http_pct_decode("x%41", 3, out, sizeof(out), false), -1);
	// Too long for out.
	assert_int_equal(http_pct_decode("0123456789abcdef", 16, out, sizeof(out), false), -1);
	assert_int_equal(http_pct_decode("0123456789abcde", 15, out, sizeof(out), false), 15);
}

static void test_query(void **state)
{
	(void)state;
	http_str q   = { "&a=1&&b&c=x%20y&d=%zz", 21 };
	size_t   pos = 0;
	http_str k, v;
	assert_true(http_query_next(q, &pos, &k, &v));
	assert_true(http_str_eq(k, "a") && http_str_eq(v, "1"));
	assert_true(http_query_next(q, &pos, &k, &v));
	assert_true(http_str_eq(k, "b") && v.n == 0);
	assert_true(http_query_next(q, &pos, &k, &v));
	assert_true(http_str_eq(k, "c") && http_str_eq(v, "x%20y"));
	assert_true(http_query_next(q, &pos, &k, &v));
	assert_false(http_query_next(q, &pos, &k, &v));
	char out[8];
	assert_int_equal(http_query_get(q, "c", out, sizeof(out)), 1);
	assert_string_equal(out, "x y");
	assert_int_equal(http_query_get(q, "d", out, sizeof(out)), -1);
	assert_int_equal(http_query_get(q, "b", out, sizeof(out)), 1);
	assert_string_equal(out, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_request_ok),
		cmocka_unit_test(test_request_keepalive),
		cmocka_unit_test(test_request_rejects),
		cmocka_unit_test(test_request_limits),
		cmocka_unit_test(test_request_split),
		cmocka_unit_test(test_response),
		cmocka_unit_test(test_chunked),
		cmocka_unit_test(test_pct_decode),
		cmocka_unit_test(test_query),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
