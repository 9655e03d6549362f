// Unit tests of nanomq_cli's WebSocket client codec (tools/nanomq_cli/
// cli_ws.c): the upgrade answer (accepted, refused, wrong key, split
// across reads), server frames turned back into bytes (split anywhere,
// 16- and 64-bit lengths, masked by a misbehaving server), pings and the
// close recorded, text and bad control frames refused, and our frames
// masked so that the server's decoder gets the payload back.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nng/codec/ws_codec.h"
#include "tools/nanomq_cli/cli_ws.h"

// A 101 answer for the key of ws.
static size_t answer(const cli_ws *ws, char *out, size_t cap, const char *accept_override)
{
	char acc[29];
	ws_accept_key(ws->key, strlen(ws->key), acc);
	return (size_t)snprintf(out, cap,
	    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
	    "Sec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n",
	    accept_override ? accept_override : acc);
}

static void test_request_and_answer(void **state)
{
	(void)state;
	cli_ws ws;
	char   req[CLI_WS_REQ_MAX], ans[512], why[200];
	size_t n = cli_ws_request(&ws, "localhost", 8083, "/mqtt", req, sizeof(req));
	assert_true(n > 0);
	assert_non_null(strstr(req, "GET /mqtt HTTP/1.1\r\n"));
	assert_non_null(strstr(req, "Host: localhost:8083\r\n"));
	assert_non_null(strstr(req, "Sec-WebSocket-Protocol: mqtt\r\n"));
	assert_int_equal(strlen(ws.key), 24);
	// The server-side parser accepts our request.
	ws_handshake h;
	memset(&h, 0, sizeof(h));
	h.path      = "/mqtt";
	size_t used = 0;
	assert_int_equal(ws_handshake_parse(&h, (const uint8_t *)req, n, &used), WS_HS_OK);
	// The answer, fed in two pieces, with a frame right behind it.
	size_t alen = answer(&ws, ans, sizeof(ans), NULL);
	memcpy(ans + alen, "\x82\x02\x20\x02", 4);
	assert_int_equal(cli_ws_response(&ws, (uint8_t *)ans, 10, &used, why, sizeof(why)), 0);
	assert_int_equal(used, 10);
	assert_int_equal(
	    cli_ws_response(&ws, (uint8_t *)ans + 10, alen + 4 - 10, &used, why, sizeof(why)), 1);
	assert_int_equal(used, alen - 10); // the frame is left over
	assert_true(ws.open);
}

static void test_answer_refusals(void **state)
{
	(void)state;
	cli_ws ws;
	char   req[CLI_WS_REQ_MAX], ans[512], why[200];
	size_t used;
	cli_ws_request(&ws, "::1", 8083, "/mqtt", req, sizeof(req));
	assert_non_null(strstr(req, "Host: [::1]:8083\r\n"));
	const char *r404 = "HTTP/1.1 404 Not Found\r\n\r\n";
	assert_int_equal(
	    cli_ws_response(&ws, (const uint8_t *)r404, strlen(r404), &used, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "404"));
	cli_ws_request(&ws, "h", 1, "/", req, sizeof(req));
	size_t alen = answer(&ws, ans, sizeof(ans), "AAAAAAAAAAAAAAAAAAAAAAAAAAA=");
	assert_int_equal(cli_ws_response(&ws, (uint8_t *)ans, alen, &used, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "Accept"));
	// An endless header block is refused, not buffered without bound.
	cli_ws_request(&ws, "h", 1, "/", req, sizeof(req));
	char junk[4096];
	memset(junk, 'a', sizeof(junk));
	assert_int_equal(
	    cli_ws_response(&ws, (uint8_t *)junk, sizeof(junk), &used, why, sizeof(why)), -1);
}

// Unframes buf one byte at a time and all at once; both give want.
static void unframe_both_ways(const uint8_t *buf, size_t len, const uint8_t *want, size_t wlen)
{
	char     why[200];
	uint8_t *a = malloc(len ? len : 1), *b = malloc(len ? len : 1), *got = malloc(wlen + 1);
	cli_ws   ws;
	memcpy(a, buf, len);
	memset(&ws, 0, sizeof(ws));
	ws.open = true;
	assert_int_equal(cli_ws_unframe(&ws, a, len, why, sizeof(why)), (long)wlen);
	assert_memory_equal(a, want, wlen);
	memset(&ws, 0, sizeof(ws));
	size_t have = 0;
	for (size_t i = 0; i < len; i++) {
		b[0]   = buf[i];
		long m = cli_ws_unframe(&ws, b, 1, why, sizeof(why));
		assert_true(m >= 0 && m <= 1);
		if (m == 1) {
			got[have++] = b[0];
		}
	}
	assert_int_equal(have, wlen);
	assert_memory_equal(got, want, wlen);
	free(a);
	free(b);
	free(got);
}

static void test_unframe_lengths_and_splits(void **state)
{
	(void)state;
	// Two small frames, an empty one, a ping between them.
	const uint8_t two[] = { 0x82, 3, 'a', 'b', 'c', 0x82, 0, 0x89, 1, 'p', 0x80, 2, 'd', 'e' };
	unframe_both_ways(two, sizeof(two), (const uint8_t *)"abcde", 5);
	// 16-bit and 64-bit lengths.
	size_t   n   = 70000;
	uint8_t *big = malloc(n + 10), *want = malloc(n);
	for (size_t i = 0; i < n; i++) {
		want[i] = (uint8_t)(i * 7);
	}
	big[0] = 0x82;
	big[1] = 127;
	for (int i = 0; i < 8; i++) {
		big[2 + i] = (uint8_t)((uint64_t)n >> (8 * (7 - i)));
	}
	memcpy(big + 10, want, n);
	unframe_both_ways(big, n + 10, want, n);
	big[1] = 126;
	big[2] = 1;
	big[3] = 44; // 300
	memcpy(big + 4, want, 300);
	unframe_both_ways(big, 304, want, 300);
	// A masked frame from a server that should not mask is still read.
	uint8_t m[] = { 0x82, 0x83, 1, 2, 3, 4, 'x' ^ 1, 'y' ^ 2, 'z' ^ 3 };
	unframe_both_ways(m, sizeof(m), (const uint8_t *)"xyz", 3);
	free(big);
	free(want);
}

static void test_control_frames_and_refusals(void **state)
{
	(void)state;
	char    why[200];
	cli_ws  ws;
	uint8_t ping[] = { 0x89, 2, 'h', 'i', 0x88, 2, 0x03, 0xe8 };
	memset(&ws, 0, sizeof(ws));
	assert_int_equal(cli_ws_unframe(&ws, ping, sizeof(ping), why, sizeof(why)), 0);
	assert_true(ws.want_pong);
	assert_int_equal(ws.pong_len, 2);
	assert_memory_equal(ws.pong, "hi", 2);
	assert_true(ws.closed);
	uint8_t text[] = { 0x81, 1, 'x' };
	memset(&ws, 0, sizeof(ws));
	assert_int_equal(cli_ws_unframe(&ws, text, sizeof(text), why, sizeof(why)), -1);
	uint8_t longping[] = { 0x89, 126, 0, 200 };
	memset(&ws, 0, sizeof(ws));
	assert_int_equal(cli_ws_unframe(&ws, longping, sizeof(longping), why, sizeof(why)), -1);
	uint8_t rsv[] = { 0xc2, 0 };
	memset(&ws, 0, sizeof(ws));
	assert_int_equal(cli_ws_unframe(&ws, rsv, sizeof(rsv), why, sizeof(why)), -1);
}

static void test_our_frames_decode_on_the_server(void **state)
{
	(void)state;
	for (size_t len = 0; len < 70000; len = len * 3 + 1) {
		uint8_t *f = malloc(CLI_WS_HDR_MAX + len);
		uint8_t  hdr[CLI_WS_HDR_MAX];
		for (size_t i = 0; i < len; i++) {
			f[CLI_WS_HDR_MAX + i] = (uint8_t)(i ^ 0x5c);
		}
		size_t hl = cli_ws_frame(hdr, 2, f + CLI_WS_HDR_MAX, len);
		assert_true(hl == 6 || hl == 8 || hl == 14);
		assert_int_equal(hdr[1] & 0x80, 0x80); // masked, as a client must
		memmove(f + CLI_WS_HDR_MAX - hl, hdr, hl);
		ws_decoder d;
		memset(&d, 0, sizeof(d));
		size_t     out = 0, raw = 0;
		ws_control ctl;
		memset(&ctl, 0, sizeof(ctl));
		int rv = ws_decode(&d, f + CLI_WS_HDR_MAX - hl, hl + len, &out, &raw, &ctl);
		assert_true(rv >= 0);
		assert_int_equal(out, len);
		for (size_t i = 0; i < len; i++) {
			assert_int_equal((f + CLI_WS_HDR_MAX - hl)[i], (uint8_t)(i ^ 0x5c));
		}
		free(f);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_request_and_answer),
		cmocka_unit_test(test_answer_refusals),
		cmocka_unit_test(test_unframe_lengths_and_splits),
		cmocka_unit_test(test_control_frames_and_refusals),
		cmocka_unit_test(test_our_frames_decode_on_the_server),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
