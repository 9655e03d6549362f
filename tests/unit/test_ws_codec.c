// Unit tests of the WebSocket codec (nng/codec/ws_codec.c): the upgrade
// request (accepted forms, every rejection with its status, requests split
// at every byte, the response texts), the frame decoder (lengths in all
// three encodings, several frames, byte-by-byte input, fragmentation,
// control frames, every error with its close code) and the frame header
// encoder.

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "nng/codec/ws_codec.h"

// ---------------------------------------------------------------------------
// Handshake helpers.

// The key and accept value of RFC 6455 section 1.3.
#define KEY    "dGhlIHNhbXBsZSBub25jZQ=="
#define ACCEPT "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

#define RLINE "GET /mqtt HTTP/1.1\r\n"
#define HOST  "Host: server.example.com\r\n"
#define UPG   "Upgrade: websocket\r\n"
#define CONN  "Connection: Upgrade\r\n"
#define SKEY  "Sec-WebSocket-Key: " KEY "\r\n"
#define SVER  "Sec-WebSocket-Version: 13\r\n"
// Everything a valid request needs but the request line and the end.
#define STD HOST UPG CONN SKEY SVER

static char req_buf[WS_HS_MAX * 2];

// Parses the C string req for the path "/mqtt"; returns the result.
static int parse_path(const char *req, const char *path, ws_handshake *h, size_t *used)
{
	memset(h, 0x55, sizeof(*h)); // outputs must all be written
	h->path = path;
	return ws_handshake_parse(h, (const uint8_t *)req, strlen(req), used);
}

// Parses req for "/mqtt".
static int parse(const char *req, ws_handshake *h, size_t *used)
{
	return parse_path(req, "/mqtt", h, used);
}

// Asserts that req is accepted for "/mqtt" as a whole, with the RFC sample
// accept key and the subprotocol proto.
static void assert_ok(const char *req, const char *proto)
{
	ws_handshake h;
	size_t       used = 0;

	assert_int_equal(parse(req, &h, &used), WS_HS_OK);
	assert_int_equal(used, strlen(req));
	assert_string_equal(h.accept, ACCEPT);
	assert_string_equal(h.protocol, proto);
}

// Asserts that req is rejected for path with status.
static void assert_reject_path(const char *req, const char *path, int status)
{
	ws_handshake h;
	size_t       used = 1234;

	assert_int_equal(parse_path(req, path, &h, &used), WS_HS_REJECT);
	assert_int_equal(h.status, status);
	assert_int_equal(used, 0);
}

// Asserts that req is rejected for "/mqtt" with status.
static void assert_reject(const char *req, int status)
{
	assert_reject_path(req, "/mqtt", status);
}

// Writes the response for h into a buffer and returns it as a string.
static const char *response(const ws_handshake *h, bool ok)
{
	static char out[WS_HS_RESPONSE_MAX];
	size_t      n = ws_handshake_response(h, ok, out, sizeof(out));

	assert_true(n > 0 && n < sizeof(out));
	assert_int_equal(strlen(out), n);
	return out;
}

// ---------------------------------------------------------------------------
// Handshake tests.

static void test_accept_key_rfc_sample(void **state)
{
	char out[29];

	(void)state;
	memset(out, 'x', sizeof(out));
	ws_accept_key(KEY, strlen(KEY), out);
	assert_string_equal(out, ACCEPT);
	// Another vector, computed with Python's hashlib and base64.
	ws_accept_key("x3JJHMbDL1EzLkh9GBhXDw==", 24, out);
	assert_string_equal(out, "HSmrc0sMlYUkAGmm5OPpG2HaGWk=");
}

static void test_browser_request(void **state)
{
	static const char req[] = "GET /mqtt HTTP/1.1\r\n"
	                          "Host: localhost:8083\r\n"
	                          "Connection: Upgrade\r\n"
	                          "Pragma: no-cache\r\n"
	                          "Cache-Control: no-cache\r\n"
	                          "User-Agent: Mozilla/5.0 (X11; Linux x86_64) Chrome/120.0\r\n"
	                          "Upgrade: websocket\r\n"
	                          "Origin: http://localhost:8080\r\n"
	                          "Sec-WebSocket-Version: 13\r\n"
	                          "Accept-Encoding: gzip, deflate, br\r\n"
	                          "Accept-Language: en-US,en;q=0.9\r\n"
	                          "Sec-WebSocket-Key: " KEY "\r\n"
	                          "Sec-WebSocket-Extensions: permessage-deflate; "
	                          "client_max_window_bits\r\n"
	                          "Sec-WebSocket-Protocol: mqtt\r\n"
	                          "\r\n";
	ws_handshake      h;
	size_t            used;

	(void)state;
	assert_int_equal(parse(req, &h, &used), WS_HS_OK);
	assert_int_equal(used, strlen(req));
	assert_int_equal(h.status, 0);
	assert_string_equal(h.accept, ACCEPT);
	assert_string_equal(h.protocol, "mqtt");
	// No extension is negotiated: the response names none.
	assert_string_equal(response(&h, true),
	    "HTTP/1.1 101 Switching Protocols\r\n"
	    "Upgrade: websocket\r\n"
	    "Connection: Upgrade\r\n"
	    "Sec-WebSocket-Accept: " ACCEPT "\r\n"
	    "Sec-WebSocket-Protocol: mqtt\r\n"
	    "\r\n");
}

static void test_subprotocol_offers(void **state)
{
	ws_handshake h;
	size_t       used;

	(void)state;
	assert_ok(RLINE STD "Sec-WebSocket-Protocol: mqtt, mqttv3.1\r\n\r\n", "mqtt");
	assert_ok(RLINE STD "Sec-WebSocket-Protocol: mqttv3.1\r\n\r\n", "mqttv3.1");
	assert_ok(RLINE STD "Sec-WebSocket-Protocol: mqttv3.1, mqtt\r\n\r\n", "mqttv3.1");
	// The first MQTT one after others, echoed as offered.
	assert_ok(RLINE STD "Sec-WebSocket-Protocol: chat,  MQTTv3.1 ,mqtt\r\n\r\n", "MQTTv3.1");
	assert_ok(RLINE STD "Sec-WebSocket-Protocol:MQTT\r\n\r\n", "MQTT");
	// Repeated header: the offers in order.
	assert_ok(RLINE STD "Sec-WebSocket-Protocol: chat\r\n"
	                    "Sec-WebSocket-Protocol: mqttv3.1\r\n"
	                    "Sec-WebSocket-Protocol: mqtt\r\n\r\n",
	    "mqttv3.1");
	assert_ok(RLINE STD "Sec-WebSocket-Protocol: chat, ,\r\n"
	                    "Sec-WebSocket-Protocol: mqtt\r\n\r\n",
	    "mqtt");
	// Offers without MQTT.
	assert_reject(RLINE STD "Sec-WebSocket-Protocol: chat\r\n\r\n", 400);
	assert_reject(RLINE STD "Sec-WebSocket-Protocol: chat, superchat\r\n\r\n", 400);
	assert_reject(RLINE STD "Sec-WebSocket-Protocol: mqtt5, mqttv3.11, xmqtt\r\n\r\n", 400);
	assert_reject(RLINE STD "Sec-WebSocket-Protocol: chat\r\n"
	                        "Sec-WebSocket-Protocol: wamp\r\n\r\n",
	    400);
	// No offer: no subprotocol, and none in the response.
	assert_ok(RLINE STD "\r\n", "");
	assert_int_equal(parse(RLINE STD "\r\n", &h, &used), WS_HS_OK);
	assert_null(strstr(response(&h, true), "Sec-WebSocket-Protocol"));
	// An empty header offers nothing either.
	assert_ok(RLINE STD "Sec-WebSocket-Protocol: \r\n\r\n", "");
}

static void test_any_host(void **state)
{
	(void)state;
	assert_ok("GET /mqtt HTTP/1.1\r\nHost: 127.0.0.1:8083\r\n" UPG CONN SKEY SVER "\r\n", "");
	assert_ok("GET /mqtt HTTP/1.1\r\nHost: broker.example:1\r\n" UPG CONN SKEY SVER "\r\n", "");
	assert_ok(
	    "GET /mqtt HTTP/1.1\r\nHost: [::1]\r\nHost: other\r\n" UPG CONN SKEY SVER "\r\n", "");
	assert_ok("GET /mqtt HTTP/1.1\r\n" UPG CONN SKEY SVER "\r\n", "");
}

static void test_header_names_any_case(void **state)
{
	(void)state;
	assert_ok("GET /mqtt HTTP/1.1\r\n"
	          "HOST: x\r\n"
	          "uPgRaDe: WebSocket\r\n"
	          "connection: UPGRADE\r\n"
	          "SEC-WEBSOCKET-KEY: " KEY "\r\n"
	          "sec-websocket-version: 13\r\n"
	          "Sec-Websocket-Protocol: Mqtt\r\n"
	          "\r\n",
	    "Mqtt");
	// Whitespace around values is not part of them.
	assert_ok("GET /mqtt HTTP/1.1\r\n"
	          "Upgrade:websocket\r\n"
	          "Connection: \t Upgrade \t\r\n"
	          "Sec-WebSocket-Key:   " KEY "  \r\n"
	          "Sec-WebSocket-Version:13\r\n"
	          "\r\n",
	    "");
	// Lines ending in LF alone are tolerated (RFC 7230 section 3.5).
	assert_ok("GET /mqtt HTTP/1.1\n"
	          "Upgrade: websocket\n"
	          "Connection: Upgrade\r\n"
	          "Sec-WebSocket-Key: " KEY "\n"
	          "Sec-WebSocket-Version: 13\n"
	          "\n",
	    "");
}

static void test_split_at_every_offset(void **state)
{
	static const char req[]                 = RLINE STD "Sec-WebSocket-Protocol: mqtt\r\n\r\n";
	static const uint8_t            after[] = { 0x82, 0x82, 1, 2, 3, 4, 0x11, 0x22 };
	uint8_t                         buf[sizeof(req) + sizeof(after)];
	size_t                          n = strlen(req);
	ws_handshake                    h;
	size_t                          used;

	(void)state;
	memcpy(buf, req, n);
	memcpy(buf + n, after, sizeof(after));
	for (size_t k = 0; k < n; k++) {
		h.path = "/mqtt";
		used   = 99;
		assert_int_equal(ws_handshake_parse(&h, buf, k, &used), WS_HS_NEED_MORE);
		assert_int_equal(used, 0);
		assert_int_equal(h.status, 0);
	}
	// Complete, with and without the first bytes of the stream behind.
	for (size_t k = n; k <= n + sizeof(after); k++) {
		h.path = "/mqtt";
		assert_int_equal(ws_handshake_parse(&h, buf, k, &used), WS_HS_OK);
		assert_int_equal(used, n);
		assert_string_equal(h.accept, ACCEPT);
		assert_string_equal(h.protocol, "mqtt");
	}
	// The parser only reads its input.
	assert_memory_equal(buf + n, after, sizeof(after));
}

// Builds a request whose total length is exactly total bytes (padded with an
// X-Pad header) into req_buf.
static const char *request_of_length(size_t total)
{
	static const char head[]            = RLINE STD "X-Pad: ";
	size_t                           hn = strlen(head);

	assert_true(total > hn + 4 && total < sizeof(req_buf));
	memcpy(req_buf, head, hn);
	memset(req_buf + hn, 'p', total - hn - 4);
	memcpy(req_buf + total - 4, "\r\n\r\n", 5);
	assert_int_equal(strlen(req_buf), total);
	return req_buf;
}

static void test_oversize_request(void **state)
{
	ws_handshake h;
	size_t       used;
	const char  *r;

	(void)state;
	// Exactly WS_HS_MAX bytes is still accepted.
	r = request_of_length(WS_HS_MAX);
	assert_int_equal(parse(r, &h, &used), WS_HS_OK);
	assert_int_equal(used, WS_HS_MAX);
	// One byte more is refused, complete or not.
	r = request_of_length(WS_HS_MAX + 1);
	assert_reject(r, 431);
	h.path = "/mqtt";
	assert_int_equal(
	    ws_handshake_parse(&h, (const uint8_t *)r, WS_HS_MAX - 1, &used), WS_HS_NEED_MORE);
	assert_int_equal(
	    ws_handshake_parse(&h, (const uint8_t *)r, WS_HS_MAX, &used), WS_HS_REJECT);
	assert_int_equal(h.status, 431);
	// Endless headers without an end.
	memset(req_buf, 'a', sizeof(req_buf));
	assert_int_equal(
	    ws_handshake_parse(&h, (const uint8_t *)req_buf, sizeof(req_buf), &used), WS_HS_REJECT);
	assert_int_equal(h.status, 431);
	assert_string_equal(response(&h, false),
	    "HTTP/1.1 431 Request Header Fields Too Large\r\n"
	    "Connection: close\r\n"
	    "Content-Length: 0\r\n"
	    "\r\n");
}

static void test_method(void **state)
{
	ws_handshake h;
	size_t       used;

	(void)state;
	assert_reject("POST /mqtt HTTP/1.1\r\n" STD "\r\n", 405);
	assert_reject("get /mqtt HTTP/1.1\r\n" STD "\r\n", 405);
	assert_reject("GETX /mqtt HTTP/1.1\r\n" STD "\r\n", 405);
	assert_int_equal(parse("HEAD /mqtt HTTP/1.1\r\n" STD "\r\n", &h, &used), WS_HS_REJECT);
	assert_string_equal(response(&h, false),
	    "HTTP/1.1 405 Method Not Allowed\r\n"
	    "Allow: GET\r\n"
	    "Connection: close\r\n"
	    "Content-Length: 0\r\n"
	    "\r\n");
}

static void test_path(void **state)
{
	ws_handshake h;
	size_t       used;

	(void)state;
	assert_reject("GET /other HTTP/1.1\r\n" STD "\r\n", 404);
	assert_reject("GET / HTTP/1.1\r\n" STD "\r\n", 404);
	assert_reject("GET /mqtt/ HTTP/1.1\r\n" STD "\r\n", 404);
	assert_reject("GET /mqttx HTTP/1.1\r\n" STD "\r\n", 404);
	assert_reject("GET /MQTT HTTP/1.1\r\n" STD "\r\n", 404);
	assert_reject("GET /other?/mqtt HTTP/1.1\r\n" STD "\r\n", 404);
	// The query string is ignored.
	assert_ok("GET /mqtt?token=abc&x=1 HTTP/1.1\r\n" STD "\r\n", "");
	assert_ok("GET /mqtt? HTTP/1.1\r\n" STD "\r\n", "");
	// Absolute form.
	assert_ok("GET ws://broker.example:8083/mqtt?x HTTP/1.1\r\n" STD "\r\n", "");
	assert_reject("GET ws://broker.example:8083/ HTTP/1.1\r\n" STD "\r\n", 404);
	assert_reject("GET http://broker.example HTTP/1.1\r\n" STD "\r\n", 404);
	// Any path when the listener names none.
	assert_int_equal(
	    parse_path("GET /anything?q HTTP/1.1\r\n" STD "\r\n", NULL, &h, &used), WS_HS_OK);
	assert_int_equal(
	    parse_path("GET http://h HTTP/1.1\r\n" STD "\r\n", NULL, &h, &used), WS_HS_OK);
	assert_int_equal(parse_path("GET / HTTP/1.1\r\n" STD "\r\n", "/", &h, &used), WS_HS_OK);
	// Not a request target at all.
	assert_reject("GET mqtt HTTP/1.1\r\n" STD "\r\n", 400);
	assert_reject("GET * HTTP/1.1\r\n" STD "\r\n", 400);
	assert_reject_path("GET mqtt HTTP/1.1\r\n" STD "\r\n", NULL, 400);
	assert_int_equal(parse("GET /x HTTP/1.1\r\n" STD "\r\n", &h, &used), WS_HS_REJECT);
	assert_string_equal(response(&h, false),
	    "HTTP/1.1 404 Not Found\r\n"
	    "Connection: close\r\n"
	    "Content-Length: 0\r\n"
	    "\r\n");
}

static void test_http_version(void **state)
{
	ws_handshake h;
	size_t       used;

	(void)state;
	assert_ok("GET /mqtt HTTP/1.2\r\n" STD "\r\n", "");
	assert_ok("GET /mqtt HTTP/1.9\r\n" STD "\r\n", "");
	assert_reject("GET /mqtt HTTP/1.0\r\n" STD "\r\n", 505);
	assert_reject("GET /mqtt HTTP/0.9\r\n" STD "\r\n", 505);
	assert_reject("GET /mqtt HTTP/2.0\r\n" STD "\r\n", 505);
	assert_reject("GET /mqtt http/1.1\r\n" STD "\r\n", 400);
	assert_reject("GET /mqtt HTTP/1.10\r\n" STD "\r\n", 400);
	assert_reject("GET /mqtt HTTP/1\r\n" STD "\r\n", 400);
	assert_reject("GET /mqtt\r\n" STD "\r\n", 400);
	assert_int_equal(parse("GET /mqtt HTTP/1.0\r\n" STD "\r\n", &h, &used), WS_HS_REJECT);
	assert_string_equal(response(&h, false),
	    "HTTP/1.1 505 HTTP Version Not Supported\r\n"
	    "Connection: close\r\n"
	    "Content-Length: 0\r\n"
	    "\r\n");
}

static void test_websocket_version(void **state)
{
	ws_handshake h;
	size_t       used;
	const char  *r;

	(void)state;
	assert_reject(RLINE HOST UPG CONN SKEY "Sec-WebSocket-Version: 8\r\n\r\n", 426);
	assert_reject(RLINE HOST UPG CONN SKEY "Sec-WebSocket-Version: 14\r\n\r\n", 426);
	assert_reject(RLINE HOST UPG CONN SKEY "Sec-WebSocket-Version: 13, 8\r\n\r\n", 426);
	assert_reject(RLINE HOST UPG CONN SKEY "Sec-WebSocket-Version: 13\r\n"
	                                       "Sec-WebSocket-Version: 8\r\n\r\n",
	    426);
	// No version: not version 13 either.
	assert_reject(RLINE HOST UPG CONN SKEY "\r\n", 426);
	assert_int_equal(
	    parse(RLINE HOST UPG CONN SKEY "Sec-WebSocket-Version: 8\r\n\r\n", &h, &used),
	    WS_HS_REJECT);
	r = response(&h, false);
	assert_string_equal(r,
	    "HTTP/1.1 426 Upgrade Required\r\n"
	    "Upgrade: websocket\r\n"
	    "Sec-WebSocket-Version: 13\r\n"
	    "Connection: close\r\n"
	    "Content-Length: 0\r\n"
	    "\r\n");
}

static void test_key(void **state)
{
	ws_handshake h;
	size_t       used;

	(void)state;
	// Missing, repeated, empty.
	assert_reject(RLINE HOST UPG CONN SVER "\r\n", 400);
	assert_reject(RLINE STD SKEY "\r\n", 400);
	assert_reject(RLINE HOST UPG CONN SVER "Sec-WebSocket-Key:\r\n\r\n", 400);
	// Not base64, or not of 16 bytes.
	assert_reject(RLINE HOST UPG CONN SVER "Sec-WebSocket-Key: abc\r\n\r\n", 400);
	assert_reject(
	    RLINE HOST UPG CONN SVER "Sec-WebSocket-Key: !!!!!!!!!!!!!!!!!!!!!!==\r\n\r\n", 400);
	// 15 bytes (20 characters), 17 bytes (24 characters, one '=').
	assert_reject(
	    RLINE HOST UPG CONN SVER "Sec-WebSocket-Key: MDEyMzQ1Njc4OWFiY2Rl\r\n\r\n", 400);
	assert_reject(
	    RLINE HOST UPG CONN SVER "Sec-WebSocket-Key: MDEyMzQ1Njc4OWFiY2RlZg=\r\n\r\n", 400);
	assert_reject(
	    RLINE HOST UPG CONN SVER "Sec-WebSocket-Key: MDEyMzQ1Njc4OWFiY2RlZmc=\r\n\r\n", 400);
	// 16 bytes but with a space inside.
	assert_reject(
	    RLINE HOST UPG CONN SVER "Sec-WebSocket-Key: dGhlIHNhbXBsZ SBub25jZQ=\r\n\r\n", 400);
	// Another valid key gives its own accept value.
	assert_int_equal(
	    parse(RLINE HOST UPG CONN SVER "Sec-WebSocket-Key: MDEyMzQ1Njc4OWFiY2RlZg==\r\n\r\n",
	        &h, &used),
	    WS_HS_OK);
	assert_string_not_equal(h.accept, ACCEPT);
	assert_int_equal(strlen(h.accept), 28);
	assert_int_equal(parse(RLINE HOST UPG CONN SVER "\r\n", &h, &used), WS_HS_REJECT);
	assert_string_equal(response(&h, false),
	    "HTTP/1.1 400 Bad Request\r\n"
	    "Connection: close\r\n"
	    "Content-Length: 0\r\n"
	    "\r\n");
}

static void test_upgrade_and_connection(void **state)
{
	(void)state;
	assert_reject(RLINE HOST CONN SKEY SVER "\r\n", 400);
	assert_reject(RLINE HOST UPG SKEY SVER "\r\n", 400);
	assert_reject(RLINE HOST "Upgrade: h2c\r\n" CONN SKEY SVER "\r\n", 400);
	assert_reject(RLINE HOST "Upgrade: websockets\r\n" CONN SKEY SVER "\r\n", 400);
	assert_reject(RLINE HOST UPG "Connection: keep-alive\r\n" SKEY SVER "\r\n", 400);
	assert_reject(RLINE HOST UPG "Connection: upgraded\r\n" SKEY SVER "\r\n", 400);
	assert_reject(RLINE HOST UPG "Connection: close\r\n" SKEY SVER "\r\n", 400);
	// Tokens inside lists, and lists spread over repeated headers.
	assert_ok(RLINE HOST UPG "Connection: keep-alive, Upgrade\r\n" SKEY SVER "\r\n", "");
	assert_ok(RLINE HOST UPG "Connection: keep-alive\r\nConnection: upgrade\r\n" SKEY SVER
	                         "\r\n",
	    "");
	assert_ok(RLINE HOST "Upgrade: foo/1, WEBSOCKET\r\n" CONN SKEY SVER "\r\n", "");
}

static void test_malformed(void **state)
{
	(void)state;
	// Header lines.
	assert_reject(RLINE STD "NoColonHere\r\n\r\n", 400);
	assert_reject(RLINE STD ": value\r\n\r\n", 400);
	assert_reject(RLINE STD "X-Bad : value\r\n\r\n", 400);
	assert_reject(RLINE STD "X-Bad(x): value\r\n\r\n", 400);
	assert_reject(RLINE STD "X-Fold: a\r\n  continued\r\n\r\n", 400);
	assert_reject(RLINE STD "X-Ctl: a\x01b\r\n\r\n", 400);
	assert_reject(RLINE STD "X-Cr: a\rb\r\n\r\n", 400);
	// Request lines.
	assert_reject("GET  /mqtt HTTP/1.1\r\n" STD "\r\n", 400);
	assert_reject("GET /mqtt  HTTP/1.1\r\n" STD "\r\n", 400);
	assert_reject("GET /mqtt HTTP/1.1 \r\n" STD "\r\n", 400);
	assert_reject(" GET /mqtt HTTP/1.1\r\n" STD "\r\n", 400);
	assert_reject("GET\t/mqtt HTTP/1.1\r\n" STD "\r\n", 400);
	assert_reject("GET /m\x7fqtt HTTP/1.1\r\n" STD "\r\n", 400);
	assert_reject("\r\n" RLINE STD "\r\n", 400);
	assert_reject("\r\n\r\n", 400);
	// An MQTT CONNECT sent to a WebSocket port has no blank line.
	{
		static const uint8_t connect[]
		    = { 0x10, 0x0c, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 60, 0, 0 };
		ws_handshake h;
		size_t       used;
		h.path = "/mqtt";
		assert_int_equal(
		    ws_handshake_parse(&h, connect, sizeof(connect), &used), WS_HS_NEED_MORE);
	}
	// Unknown headers with odd but legal content are fine.
	assert_ok(RLINE STD "X-Any: \xc3\xa9t\xc3\xa9\t!\r\nX-Empty:\r\n\r\n", "");
}

static void test_response_sizes(void **state)
{
	ws_handshake     h;
	size_t           used, n;
	char             out[WS_HS_RESPONSE_MAX];
	static const int statuses[] = { 400, 404, 405, 426, 431, 505 };

	(void)state;
	assert_int_equal(
	    parse(RLINE STD "Sec-WebSocket-Protocol: mqttv3.1\r\n\r\n", &h, &used), WS_HS_OK);
	n = ws_handshake_response(&h, true, out, sizeof(out));
	assert_true(n > 0);
	assert_string_equal(out,
	    "HTTP/1.1 101 Switching Protocols\r\n"
	    "Upgrade: websocket\r\n"
	    "Connection: Upgrade\r\n"
	    "Sec-WebSocket-Accept: " ACCEPT "\r\n"
	    "Sec-WebSocket-Protocol: mqttv3.1\r\n"
	    "\r\n");
	// The text and its NUL must fit.
	assert_int_equal(ws_handshake_response(&h, true, out, n + 1), n);
	assert_int_equal(ws_handshake_response(&h, true, out, n), 0);
	assert_int_equal(ws_handshake_response(&h, true, out, 10), 0);
	assert_int_equal(ws_handshake_response(&h, true, out, 0), 0);
	for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++) {
		char code[8];

		h.status = statuses[i];
		n        = ws_handshake_response(&h, false, out, sizeof(out));
		assert_true(n > 0 && n < sizeof(out));
		snprintf(code, sizeof(code), " %d ", statuses[i]);
		assert_memory_equal(out, "HTTP/1.1", 8);
		assert_memory_equal(out + 8, code, 5);
		assert_non_null(strstr(out, "\r\nConnection: close\r\n"));
		assert_int_equal(ws_handshake_response(&h, false, out, n), 0);
	}
}

// ---------------------------------------------------------------------------
// Frame helpers.

static const uint8_t MASK[4] = { 0x37, 0xfa, 0x21, 0x3d };

// Writes a client frame: first byte b0, masked with MASK (unless masked is
// false), the length in its shortest form; returns its size.
static size_t mkframe_m(uint8_t *out, uint8_t b0, const void *payload, size_t n, bool masked)
{
	const uint8_t *p = payload;
	size_t         h = 0;
	uint8_t        m = masked ? 0x80 : 0;

	out[h++] = b0;
	if (n <= 125) {
		out[h++] = (uint8_t)(m | n);
	} else if (n <= 0xFFFF) {
		out[h++] = m | 126;
		out[h++] = (uint8_t)(n >> 8);
		out[h++] = (uint8_t)n;
	} else {
		out[h++] = m | 127;
		for (int i = 7; i >= 0; i--) {
			out[h++] = (uint8_t)((uint64_t)n >> (8 * i));
		}
	}
	if (masked) {
		memcpy(out + h, MASK, 4);
		h += 4;
	}
	for (size_t i = 0; i < n; i++) {
		out[h + i] = masked ? p[i] ^ MASK[i % 4] : p[i];
	}
	return h + n;
}

// Writes a masked client frame; returns its size.
static size_t mkframe(uint8_t *out, uint8_t b0, const void *payload, size_t n)
{
	return mkframe_m(out, b0, payload, n, true);
}

#define BIN_FIN  0x82
#define BIN_MORE 0x02
#define CONT_FIN 0x80
#define CONT     0x00
#define PING     0x89
#define PONG     0x8A
#define CLOSE    0x88

static uint8_t big_payload[70000];
static uint8_t big_buf[70100];

// Fills big_payload with a pattern that differs from byte to byte.
static int setup_payload(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(big_payload); i++) {
		big_payload[i] = (uint8_t)(i * 7 + (i >> 8));
	}
	return 0;
}

// The caller's side: the buffer with decoded bytes in [0, out), undecoded
// ones in [raw, len), and what came back.
typedef struct feeder {
	uint8_t   *buf;
	size_t     cap, len, out, raw;
	ws_decoder d;
	ws_control ctl[8];
	int        nctl;
	int        err; // set once WS_DEC_ERROR came back
	uint16_t   err_code;
} feeder;

// Starts a feeder over buf of cap bytes.
static void feeder_init(feeder *f, uint8_t *buf, size_t cap)
{
	memset(f, 0, sizeof(*f));
	f->buf = buf;
	f->cap = cap;
}

// Decodes until the decoder waits or fails, recording control frames.
static void feeder_run(feeder *f)
{
	for (;;) {
		ws_control c;
		size_t     out0 = f->out, raw0 = f->raw;
		int        r = ws_decode(&f->d, f->buf, f->len, &f->out, &f->raw, &c);

		assert_true(f->out <= f->raw && f->raw <= f->len);
		assert_true(f->out >= out0 && f->raw >= raw0);
		if (r == WS_DEC_OK) {
			return;
		}
		if (r == WS_DEC_ERROR) {
			f->err      = 1;
			f->err_code = c.close_code;
			return;
		}
		assert_int_equal(r, WS_DEC_CONTROL);
		assert_true(f->nctl < 8);
		f->ctl[f->nctl++] = c;
		if (c.opcode == WS_OP_CLOSE) {
			return;
		}
	}
}

// Appends n bytes to the feeder and runs it.
static void feeder_push(feeder *f, const void *p, size_t n)
{
	assert_true(f->len + n <= f->cap);
	memcpy(f->buf + f->len, p, n);
	f->len += n;
	feeder_run(f);
}

// Decodes frames[0..n) fed in chunks of chunk bytes into f (over big_buf).
static void feed_chunks(feeder *f, const uint8_t *frames, size_t n, size_t chunk)
{
	feeder_init(f, big_buf, sizeof(big_buf));
	for (size_t i = 0; i < n && !f->err; i += chunk) {
		feeder_push(f, frames + i, n - i < chunk ? n - i : chunk);
	}
}

// Decodes one buffer in one call and returns the result.
static int decode_once(const uint8_t *frame, size_t n, ws_control *c)
{
	static uint8_t b[512];
	ws_decoder     d;
	size_t         out = 0, raw = 0;

	assert_true(n <= sizeof(b));
	memset(&d, 0, sizeof(d));
	memcpy(b, frame, n);
	return ws_decode(&d, b, n, &out, &raw, c);
}

// Asserts that bytes (a frame or a sequence) end in WS_DEC_ERROR with code,
// both at once and fed byte by byte, and that the decoder stays failed.
static void assert_dec_error(const uint8_t *bytes, size_t n, uint16_t code)
{
	static uint8_t    b[512];
	static const char valid[] = "\x82\x81\0\0\0\0x";
	ws_control        c;
	ws_decoder        d;
	size_t            out = 0, raw = 0;
	int               r;
	feeder            f;

	assert_true(n + 8 <= sizeof(b));
	memset(&d, 0, sizeof(d));
	memcpy(b, bytes, n);
	do {
		r = ws_decode(&d, b, n, &out, &raw, &c);
	} while (r == WS_DEC_CONTROL);
	assert_int_equal(r, WS_DEC_ERROR);
	assert_int_equal(c.close_code, code);
	assert_true(d.closed);
	// Stays failed, with or without more input.
	memcpy(b + n, valid, 7);
	assert_int_equal(ws_decode(&d, b, n, &out, &raw, &c), WS_DEC_ERROR);
	assert_int_equal(ws_decode(&d, b, n + 7, &out, &raw, &c), WS_DEC_ERROR);

	feeder_init(&f, b, sizeof(b));
	for (size_t i = 0; i < n && !f.err; i++) {
		feeder_push(&f, bytes + i, 1);
	}
	assert_true(f.err);
	assert_int_equal(f.err_code, code);
}

// ---------------------------------------------------------------------------
// Decoder tests.

static void test_lengths(void **state)
{
	static const size_t lens[] = { 0, 1, 2, 7, 8, 9, 125, 126, 127, 65535, 65536, 69000 };
	static uint8_t      frame[70100];

	(void)state;
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		size_t     n  = lens[i];
		size_t     fl = mkframe(frame, BIN_FIN, big_payload, n);
		size_t     hl = n <= 125 ? 6 : n <= 65535 ? 8 : 14;
		ws_decoder d;
		ws_control c;
		size_t     out = 0, raw = 0;

		assert_int_equal(fl, hl + n);
		memset(&d, 0, sizeof(d));
		assert_int_equal(ws_decode(&d, frame, fl, &out, &raw, &c), WS_DEC_OK);
		assert_int_equal(out, n);
		assert_int_equal(raw, fl);
		assert_memory_equal(frame, big_payload, n);
		assert_false(d.in_payload);
		assert_false(d.fragmented);
		assert_false(d.closed);
		// Nothing more: nothing happens.
		assert_int_equal(ws_decode(&d, frame, fl, &out, &raw, &c), WS_DEC_OK);
		assert_int_equal(out, n);
		assert_int_equal(raw, fl);
	}
}

static void test_non_minimal_length_accepted(void **state)
{
	// 5 bytes announced with a 16-bit and with a 64-bit length.
	static const uint8_t f16[] = { 0x82, 0xFE, 0, 5, 0, 0, 0, 0, 'h', 'e', 'l', 'l', 'o' };
	static const uint8_t f64[]
	    = { 0x82, 0xFF, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 'w', 'o', 'r', 'l', 'd' };
	feeder f;

	(void)state;
	feed_chunks(&f, f16, sizeof(f16), sizeof(f16));
	assert_int_equal(f.out, 5);
	assert_memory_equal(f.buf, "hello", 5);
	feed_chunks(&f, f64, sizeof(f64), 1);
	assert_int_equal(f.out, 5);
	assert_memory_equal(f.buf, "world", 5);
}

static void test_several_frames_in_one_buffer(void **state)
{
	uint8_t    b[512];
	size_t     n = 0, out = 0, raw = 0;
	ws_decoder d;
	ws_control c;

	(void)state;
	n += mkframe(b + n, BIN_FIN, "\x10\x0c\x00\x04MQ", 6);
	n += mkframe(b + n, BIN_FIN, "", 0);
	n += mkframe(b + n, BIN_FIN, "TT\x04\x02\x00\x3c\x00\x00", 8);
	n += mkframe(b + n, BIN_FIN, big_payload, 200);
	size_t complete = n;
	// The first bytes of the next frame's header only.
	b[n++] = BIN_FIN;
	b[n++] = 0xFE;
	b[n++] = 0x01;
	memset(&d, 0, sizeof(d));
	assert_int_equal(ws_decode(&d, b, n, &out, &raw, &c), WS_DEC_OK);
	assert_int_equal(out, 14 + 200);
	assert_int_equal(raw, complete);
	assert_memory_equal(b, "\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00", 14);
	assert_memory_equal(b + 14, big_payload, 200);
	// The incomplete header is untouched.
	assert_memory_equal(b + raw, "\x82\xFE\x01", 3);
}

static void test_byte_by_byte(void **state)
{
	static uint8_t frames[2000];
	static uint8_t expect[1000];
	size_t         n = 0, e = 0;
	feeder         f;

	(void)state;
	for (size_t len = 0; len < 30; len++) {
		n += mkframe(frames + n, BIN_FIN, big_payload + e, len);
		memcpy(expect + e, big_payload + e, len);
		e += len;
	}
	n += mkframe(frames + n, PING, "ping!", 5);
	n += mkframe(frames + n, BIN_MORE, big_payload + e, 130);
	memcpy(expect + e, big_payload + e, 130);
	e += 130;
	n += mkframe(frames + n, PONG, "", 0);
	n += mkframe(frames + n, CONT_FIN, big_payload + e, 3);
	memcpy(expect + e, big_payload + e, 3);
	e += 3;
	assert_true(n <= sizeof(frames) && e <= sizeof(expect));

	for (size_t chunk = 1; chunk <= 17; chunk++) {
		feed_chunks(&f, frames, n, chunk);
		assert_false(f.err);
		assert_int_equal(f.out, e);
		assert_int_equal(f.raw, n);
		assert_memory_equal(f.buf, expect, e);
		assert_int_equal(f.nctl, 2);
		assert_int_equal(f.ctl[0].opcode, WS_OP_PING);
		assert_int_equal(f.ctl[0].len, 5);
		assert_memory_equal(f.ctl[0].payload, "ping!", 5);
		assert_int_equal(f.ctl[1].opcode, WS_OP_PONG);
		assert_int_equal(f.ctl[1].len, 0);
		assert_false(f.d.fragmented);
	}
}

static void test_partial_payload_is_decoded_as_it_arrives(void **state)
{
	static uint8_t frame[400];
	size_t         n = mkframe(frame, BIN_FIN, big_payload, 300);
	ws_decoder     d;
	ws_control     c;
	size_t         out = 0, raw = 0;

	(void)state;
	memset(&d, 0, sizeof(d));
	// The header and 101 payload bytes (mask offset ends at 1).
	assert_int_equal(ws_decode(&d, frame, 8 + 101, &out, &raw, &c), WS_DEC_OK);
	assert_int_equal(out, 101);
	assert_int_equal(raw, 8 + 101);
	assert_true(d.in_payload);
	assert_int_equal(d.left, 199);
	assert_int_equal(d.mask_off, 1);
	assert_int_equal(ws_decode(&d, frame, 8 + 203, &out, &raw, &c), WS_DEC_OK);
	assert_int_equal(out, 203);
	assert_int_equal(ws_decode(&d, frame, n, &out, &raw, &c), WS_DEC_OK);
	assert_int_equal(out, 300);
	assert_int_equal(raw, n);
	assert_false(d.in_payload);
	assert_memory_equal(frame, big_payload, 300);
}

static void test_unmask_every_offset_and_size(void **state)
{
	static uint8_t frames[8000];
	static uint8_t expect[4000];
	feeder         f;

	(void)state;
	// Payload sizes 1..70 each fed in chunks of 1..13 bytes: every start
	// position in the mask meets every tail length of the 8-byte loop.
	for (size_t len = 1; len <= 70; len++) {
		size_t n = mkframe(frames, BIN_FIN, big_payload + len, len);
		memcpy(expect, big_payload + len, len);
		for (size_t chunk = 1; chunk <= 13; chunk++) {
			feed_chunks(&f, frames, n, chunk);
			assert_false(f.err);
			assert_int_equal(f.out, len);
			assert_memory_equal(f.buf, expect, len);
		}
	}
}

static void test_fragmented_message(void **state)
{
	uint8_t b[512];
	size_t  n = 0;
	feeder  f;

	(void)state;
	n += mkframe(b + n, BIN_MORE, "\x30\x0a\x00", 3);
	n += mkframe(b + n, CONT, "\x03", 1);
	n += mkframe(b + n, CONT, "", 0);
	n += mkframe(b + n, CONT_FIN, "a/bhello", 8);
	// A new message after the end of the previous one.
	n += mkframe(b + n, BIN_FIN, "\xc0\x00", 2);
	for (size_t chunk = 1; chunk <= n; chunk++) {
		feed_chunks(&f, b, n, chunk);
		assert_false(f.err);
		assert_int_equal(f.out, 14);
		assert_memory_equal(f.buf,
		    "\x30\x0a\x00\x03"
		    "a/bhello\xc0\x00",
		    14);
		assert_false(f.d.fragmented);
	}
	// The decoder says when a message is open.
	feed_chunks(&f, b, mkframe(b, BIN_MORE, "x", 1), 100);
	assert_true(f.d.fragmented);
}

static void test_ping_inside_fragmented_message(void **state)
{
	uint8_t    b[512];
	size_t     n = 0, out = 0, raw = 0;
	ws_decoder d;
	ws_control c;

	(void)state;
	n += mkframe(b + n, BIN_MORE, "abc", 3);
	size_t ping_at = n;
	n += mkframe(b + n, PING, "hi", 2);
	size_t ping_end = n;
	n += mkframe(b + n, CONT_FIN, "def", 3);
	memset(&d, 0, sizeof(d));
	assert_int_equal(ws_decode(&d, b, n, &out, &raw, &c), WS_DEC_CONTROL);
	assert_int_equal(c.opcode, WS_OP_PING);
	assert_int_equal(c.len, 2);
	assert_memory_equal(c.payload, "hi", 2);
	assert_int_equal(out, 3);
	assert_int_equal(raw, ping_end);
	assert_true(ping_at < ping_end);
	assert_true(d.fragmented);
	assert_int_equal(ws_decode(&d, b, n, &out, &raw, &c), WS_DEC_OK);
	assert_int_equal(out, 6);
	assert_int_equal(raw, n);
	assert_memory_equal(b, "abcdef", 6);
	assert_false(d.fragmented);
}

static void test_incomplete_control_frame_waits(void **state)
{
	uint8_t    b[200];
	size_t     n = mkframe(b, PING, "0123456789", 10);
	ws_decoder d;
	ws_control c;
	size_t     out = 0, raw = 0;

	(void)state;
	memset(&d, 0, sizeof(d));
	for (size_t k = 0; k < n; k++) {
		assert_int_equal(ws_decode(&d, b, k, &out, &raw, &c), WS_DEC_OK);
		assert_int_equal(raw, 0);
		assert_int_equal(out, 0);
	}
	assert_int_equal(ws_decode(&d, b, n, &out, &raw, &c), WS_DEC_CONTROL);
	assert_int_equal(raw, n);
	assert_int_equal(out, 0);
	assert_int_equal(c.len, 10);
	assert_memory_equal(c.payload, "0123456789", 10);
	// A control frame of the longest size.
	n = mkframe(b, PONG, big_payload, 125);
	memset(&d, 0, sizeof(d));
	out = raw = 0;
	assert_int_equal(ws_decode(&d, b, n, &out, &raw, &c), WS_DEC_CONTROL);
	assert_int_equal(c.opcode, WS_OP_PONG);
	assert_int_equal(c.len, 125);
	assert_memory_equal(c.payload, big_payload, 125);
}

static void test_close_frames(void **state)
{
	uint8_t               b[256];
	size_t                n, out = 0, raw = 0;
	ws_decoder            d;
	ws_control            c;
	static const uint16_t valid[] = { 1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011,
		1012, 1013, 1014, 3000, 4000, 4999 };
	static const uint16_t invalid[]
	    = { 0, 999, 1004, 1005, 1006, 1015, 1016, 2000, 2999, 5000, 65535 };

	(void)state;
	// With a code and a reason; data before it is decoded.
	n = mkframe(b, BIN_FIN, "mq", 2);
	n += mkframe(b + n, CLOSE,
	    "\x03\xe8"
	    "bye",
	    5);
	size_t close_end = n;
	n += mkframe(b + n, BIN_FIN, "late", 4);
	memset(&d, 0, sizeof(d));
	assert_int_equal(ws_decode(&d, b, n, &out, &raw, &c), WS_DEC_CONTROL);
	assert_int_equal(c.opcode, WS_OP_CLOSE);
	assert_int_equal(c.close_code, 1000);
	assert_int_equal(c.len, 5);
	assert_memory_equal(c.payload,
	    "\x03\xe8"
	    "bye",
	    5);
	assert_int_equal(out, 2);
	assert_int_equal(raw, close_end);
	assert_true(d.closed);
	// Nothing after a close frame.
	assert_int_equal(ws_decode(&d, b, n, &out, &raw, &c), WS_DEC_ERROR);
	assert_int_equal(c.close_code, WS_CLOSE_PROTOCOL);
	assert_int_equal(ws_decode(&d, b, raw, &out, &raw, &c), WS_DEC_ERROR);
	assert_int_equal(out, 2);

	// Without a payload: 1005.
	n = mkframe(b, CLOSE, "", 0);
	assert_int_equal(decode_once(b, n, &c), WS_DEC_CONTROL);
	assert_int_equal(c.close_code, 1005);
	assert_int_equal(c.len, 0);

	for (size_t i = 0; i < sizeof(valid) / sizeof(valid[0]); i++) {
		uint8_t p[2] = { (uint8_t)(valid[i] >> 8), (uint8_t)valid[i] };
		n            = mkframe(b, CLOSE, p, 2);
		assert_int_equal(decode_once(b, n, &c), WS_DEC_CONTROL);
		assert_int_equal(c.close_code, valid[i]);
	}
	for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
		uint8_t p[2] = { (uint8_t)(invalid[i] >> 8), (uint8_t)invalid[i] };
		n            = mkframe(b, CLOSE, p, 2);
		assert_dec_error(b, n, WS_CLOSE_PROTOCOL);
	}
	// A one-byte payload cannot hold a code.
	n = mkframe(b, CLOSE, "\x03", 1);
	assert_dec_error(b, n, WS_CLOSE_PROTOCOL);
}

static void test_errors(void **state)
{
	uint8_t b[256];
	size_t  n;

	(void)state;
	// RSV1, RSV2, RSV3 (no extension is negotiated).
	n = mkframe(b, 0xC2, "x", 1);
	assert_dec_error(b, n, WS_CLOSE_PROTOCOL);
	n = mkframe(b, 0xA2, "x", 1);
	assert_dec_error(b, n, WS_CLOSE_PROTOCOL);
	n = mkframe(b, 0x92, "x", 1);
	assert_dec_error(b, n, WS_CLOSE_PROTOCOL);
	n = mkframe(b, 0xC9, "", 0); // on a control frame too
	assert_dec_error(b, n, WS_CLOSE_PROTOCOL);
	// Unmasked data and control frames.
	n = mkframe_m(b, BIN_FIN, "x", 1, false);
	assert_dec_error(b, n, WS_CLOSE_PROTOCOL);
	n = mkframe_m(b, PING, "", 0, false);
	assert_dec_error(b, n, WS_CLOSE_PROTOCOL);
	// Reserved opcodes.
	static const uint8_t reserved[] = { 3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF };
	for (size_t i = 0; i < sizeof(reserved); i++) {
		n = mkframe(b, (uint8_t)(0x80 | reserved[i]), "x", 1);
		assert_dec_error(b, n, WS_CLOSE_PROTOCOL);
	}
	// Text frames, also as a continuation's first frame.
	n = mkframe(b, 0x81, "hello", 5);
	assert_dec_error(b, n, WS_CLOSE_DATA_TYPE);
	n = mkframe(b, 0x01, "hello", 5);
	assert_dec_error(b, n, WS_CLOSE_DATA_TYPE);
	// A continuation without a message.
	n = mkframe(b, CONT_FIN, "x", 1);
	assert_dec_error(b, n, WS_CLOSE_PROTOCOL);
	n = mkframe(b, BIN_FIN, "x", 1);
	n += mkframe(b + n, CONT, "y", 1);
	assert_dec_error(b, n, WS_CLOSE_PROTOCOL);
	// A new message inside one.
	n = mkframe(b, BIN_MORE, "x", 1);
	n += mkframe(b + n, BIN_FIN, "y", 1);
	assert_dec_error(b, n, WS_CLOSE_PROTOCOL);
	n = mkframe(b, BIN_MORE, "x", 1);
	n += mkframe(b + n, 0x81, "y", 1);
	assert_dec_error(b, n, WS_CLOSE_DATA_TYPE);
	// Fragmented control frames.
	n = mkframe(b, 0x09, "x", 1);
	assert_dec_error(b, n, WS_CLOSE_PROTOCOL);
	n = mkframe(b, 0x08, "", 0);
	assert_dec_error(b, n, WS_CLOSE_PROTOCOL);
	// Over-long control frames (16- and 64-bit lengths).
	n = mkframe(b, PING, big_payload, 126);
	assert_dec_error(b, n, WS_CLOSE_PROTOCOL);
	{
		static const uint8_t pong64[]
		    = { PONG, 0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0 };
		assert_dec_error(pong64, sizeof(pong64), WS_CLOSE_PROTOCOL);
	}
	// A 64-bit length with its top bit set.
	{
		static const uint8_t huge[]
		    = { BIN_FIN, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4 };
		assert_dec_error(huge, sizeof(huge), WS_CLOSE_PROTOCOL);
	}
	// After valid data, the error still comes with its code.
	n = mkframe(b, BIN_FIN, "ok", 2);
	n += mkframe(b + n, PING, "p", 1);
	n += mkframe(b + n, 0x81, "t", 1);
	assert_dec_error(b, n, WS_CLOSE_DATA_TYPE);
}

static void test_errors_seen_from_two_bytes(void **state)
{
	static const uint8_t cases[][2] = { { 0xC2, 0x85 }, { 0x82, 0x05 }, { 0x83, 0x85 },
		{ 0x81, 0x85 }, { 0x80, 0x85 }, { 0x09, 0x80 }, { 0x89, 0xFE } };
	ws_control           c;

	(void)state;
	// The first two bytes suffice: no need to wait for the rest.
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(decode_once(cases[i], 2, &c), WS_DEC_ERROR);
		assert_int_equal(decode_once(cases[i], 1, &c), WS_DEC_OK);
	}
}

static void test_huge_frame_streams(void **state)
{
	// A frame announcing 2^62 bytes: its payload is decoded as it comes
	// (the upper layer limits packet sizes).
	uint8_t    b[64] = { BIN_FIN, 0xFF, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
	ws_decoder d;
	ws_control c;
	size_t     out = 0, raw = 0;

	(void)state;
	memset(b + 14, 'z', 50);
	memset(&d, 0, sizeof(d));
	assert_int_equal(ws_decode(&d, b, sizeof(b), &out, &raw, &c), WS_DEC_OK);
	assert_int_equal(out, 50);
	assert_int_equal(raw, 64);
	assert_true(d.in_payload);
	assert_int_equal(d.left, (UINT64_C(1) << 62) - 50);
}

// ---------------------------------------------------------------------------
// Encoder tests.

static void test_frame_header(void **state)
{
	uint8_t h[10];

	(void)state;
	assert_int_equal(ws_frame_header(h, WS_OP_BINARY, 0), 2);
	assert_memory_equal(h, "\x82\x00", 2);
	assert_int_equal(ws_frame_header(h, WS_OP_BINARY, 125), 2);
	assert_memory_equal(h, "\x82\x7d", 2);
	assert_int_equal(ws_frame_header(h, WS_OP_BINARY, 126), 4);
	assert_memory_equal(h, "\x82\x7e\x00\x7e", 4);
	assert_int_equal(ws_frame_header(h, WS_OP_BINARY, 65535), 4);
	assert_memory_equal(h, "\x82\x7e\xff\xff", 4);
	assert_int_equal(ws_frame_header(h, WS_OP_BINARY, 65536), 10);
	assert_memory_equal(h, "\x82\x7f\x00\x00\x00\x00\x00\x01\x00\x00", 10);
	assert_int_equal(ws_frame_header(h, WS_OP_BINARY, UINT64_C(0x0102030405060708)), 10);
	assert_memory_equal(h, "\x82\x7f\x01\x02\x03\x04\x05\x06\x07\x08", 10);
	assert_int_equal(ws_frame_header(h, WS_OP_CLOSE, 2), 2);
	assert_memory_equal(h, "\x88\x02", 2);
	assert_int_equal(ws_frame_header(h, WS_OP_PONG, 5), 2);
	assert_memory_equal(h, "\x8a\x05", 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accept_key_rfc_sample),
		cmocka_unit_test(test_browser_request),
		cmocka_unit_test(test_subprotocol_offers),
		cmocka_unit_test(test_any_host),
		cmocka_unit_test(test_header_names_any_case),
		cmocka_unit_test(test_split_at_every_offset),
		cmocka_unit_test(test_oversize_request),
		cmocka_unit_test(test_method),
		cmocka_unit_test(test_path),
		cmocka_unit_test(test_http_version),
		cmocka_unit_test(test_websocket_version),
		cmocka_unit_test(test_key),
		cmocka_unit_test(test_upgrade_and_connection),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_response_sizes),
		cmocka_unit_test(test_lengths),
		cmocka_unit_test(test_non_minimal_length_accepted),
		cmocka_unit_test(test_several_frames_in_one_buffer),
		cmocka_unit_test(test_byte_by_byte),
		cmocka_unit_test(test_partial_payload_is_decoded_as_it_arrives),
		cmocka_unit_test(test_unmask_every_offset_and_size),
		cmocka_unit_test(test_fragmented_message),
		cmocka_unit_test(test_ping_inside_fragmented_message),
		cmocka_unit_test(test_incomplete_control_frame_waits),
		cmocka_unit_test(test_close_frames),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_errors_seen_from_two_bytes),
		cmocka_unit_test(test_huge_frame_streams),
		cmocka_unit_test(test_frame_header),
	};

	return cmocka_run_group_tests(tests, setup_payload, NULL);
}
