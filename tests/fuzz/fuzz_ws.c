// libFuzzer target for the WebSocket codec (nng/codec/ws_codec.c).
//
// 1. The input as an upgrade request: the result is one of the three, a
//    rejection has a known status, an acceptance has a 28-character accept
//    key, an MQTT subprotocol or none, and the same result for exactly its
//    own bytes (one byte less is incomplete); every response fits.
// 2. The input after its first byte as client frames, fed to the decoder
//    in chunks whose sizes the first byte chooses, the way the transport
//    does (decoded bytes kept at the front, new bytes appended, sometimes
//    the decoded bytes consumed and the rest moved down). The offsets must
//    keep out <= raw <= len, and the decoded stream, the control frames
//    and the final error must equal those of a simple reference decoder
//    that reads the whole input at once.
// 3. ws_frame_header on a length taken from the input.

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nng/codec/ws_codec.h"

// Stops the run with a message; libFuzzer records the input as a crash.
#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_ws: check failed: %s (%s:%d)\n", #cond, __FILE__,    \
			    __LINE__);                                                             \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

// What a decoder produced over the whole input.
typedef struct result {
	uint8_t *data; // the decoded stream
	size_t   n;
	size_t   nev; // control frames
	uint64_t ev_hash; // and a hash of them all, in order
	int      error; // 1 if it ended in WS_DEC_ERROR
	uint16_t code; // then the close code
} result;

// Folds a control frame into r's count and hash (FNV-1a over the opcode,
// the length, the payload and, for a close frame, the code).
static void add_event(result *r, const ws_control *c)
{
	uint64_t h = r->nev == 0 ? UINT64_C(0xcbf29ce484222325) : r->ev_hash;
	uint8_t  head[4];

	head[0] = c->opcode;
	head[1] = c->len;
	head[2] = c->opcode == WS_OP_CLOSE ? (uint8_t)(c->close_code >> 8) : 0;
	head[3] = c->opcode == WS_OP_CLOSE ? (uint8_t)c->close_code : 0;
	for (size_t i = 0; i < 4 + (size_t)c->len; i++) {
		h ^= i < 4 ? head[i] : c->payload[i - 4];
		h *= UINT64_C(0x100000001b3);
	}
	r->ev_hash = h;
	r->nev++;
}

// Returns true if s equals t ignoring ASCII case.
static bool ieq(const char *s, const char *t)
{
	for (; *s != '\0' && *t != '\0'; s++, t++) {
		int a = (*s >= 'A' && *s <= 'Z') ? *s + 32 : *s;
		int b = (*t >= 'A' && *t <= 'Z') ? *t + 32 : *t;
		if (a != b) {
			return false;
		}
	}
	return *s == *t;
}

// Checks the response for a parse result.
static void check_response(const ws_handshake *h, bool ok)
{
	char   out[WS_HS_RESPONSE_MAX];
	char   small[40];
	size_t n = ws_handshake_response(h, ok, out, sizeof(out));

	CHECK(n > 0 && n < sizeof(out) && strlen(out) == n);
	CHECK(memcmp(out, "HTTP/1.1 ", 9) == 0);
	CHECK(n >= 4 && memcmp(out + n - 4, "\r\n\r\n", 4) == 0);
	if (ok) {
		CHECK(memcmp(out + 9, "101 ", 4) == 0);
	} else {
		CHECK(atoi(out + 9) == h->status);
	}
	CHECK(ws_handshake_response(h, ok, small, sizeof(small)) == 0);
}

// Runs the handshake parser over data for one listener path.
static void fuzz_handshake(const uint8_t *data, size_t size, const char *path)
{
	ws_handshake h;
	size_t       used = 7;
	int          rc;

	memset(&h, 0, sizeof(h));
	h.path = path;
	rc     = ws_handshake_parse(&h, data, size, &used);
	switch (rc) {
	case WS_HS_NEED_MORE:
		CHECK(size < WS_HS_MAX && used == 0 && h.status == 0);
		break;
	case WS_HS_REJECT:
		CHECK(used == 0);
		CHECK(h.status == 400 || h.status == 404 || h.status == 405 || h.status == 426
		    || h.status == 431 || h.status == 505);
		CHECK(path != NULL || h.status != 404);
		check_response(&h, false);
		break;
	case WS_HS_OK: {
		ws_handshake again;
		size_t       used2 = 0;

		CHECK(used > 0 && used <= size && used <= WS_HS_MAX);
		CHECK(data[used - 1] == '\n');
		CHECK(strlen(h.accept) == 28);
		CHECK(h.protocol[0] == '\0' || ieq(h.protocol, "mqtt")
		    || ieq(h.protocol, "mqttv3.1"));
		check_response(&h, true);
		// The request's own bytes give the same result; one less is
		// incomplete.
		memset(&again, 0, sizeof(again));
		again.path = path;
		CHECK(ws_handshake_parse(&again, data, used, &used2) == WS_HS_OK);
		CHECK(used2 == used);
		CHECK(strcmp(again.accept, h.accept) == 0);
		CHECK(strcmp(again.protocol, h.protocol) == 0);
		CHECK(ws_handshake_parse(&again, data, used - 1, &used2) == WS_HS_NEED_MORE);
		// A listener serving any path accepts it too.
		if (path != NULL) {
			again.path = NULL;
			CHECK(ws_handshake_parse(&again, data, size, &used2) == WS_HS_OK);
			CHECK(used2 == used);
		}
		break;
	}
	default:
		CHECK(0);
	}
}

// Returns true for a close code a close frame may carry.
static bool ref_code_ok(unsigned c)
{
	return (c >= 1000 && c <= 1003) || (c >= 1007 && c <= 1014) || (c >= 3000 && c <= 4999);
}

// The reference: decodes the whole of in[0..n) frame by frame into r (whose
// data has room for n bytes), without state carried between calls.
static void ref_decode(const uint8_t *in, size_t n, result *r)
{
	size_t pos  = 0;
	bool   frag = false;

	while (n - pos >= 2) {
		const uint8_t *p   = in + pos;
		bool           fin = p[0] & 0x80;
		unsigned       op  = p[0] & 0x0F;
		unsigned       l7  = p[1] & 0x7F;
		size_t         hl;
		uint64_t       len = l7;
		size_t         avail;
		const uint8_t *mask;

		r->code = 1002;
		if ((p[0] & 0x70) || !(p[1] & 0x80)) {
			r->error = 1;
			return;
		}
		if (op == 1) {
			r->code  = 1003;
			r->error = 1;
			return;
		}
		if ((op == 0 && !frag) || (op == 2 && frag) || (op >= 3 && op <= 7) || op > 10
		    || (op >= 8 && (!fin || l7 > 125))) {
			r->error = 1;
			return;
		}
		hl = 2 + (l7 == 126 ? 2 : l7 == 127 ? 8 : 0) + 4;
		if (n - pos < hl) {
			return;
		}
		if (l7 == 126) {
			len = (uint64_t)p[2] * 256 + p[3];
		} else if (l7 == 127) {
			len = 0;
			for (int i = 0; i < 8; i++) {
				len = len * 256 + p[2 + i];
			}
			if (len >= (UINT64_C(1) << 63)) {
				r->error = 1;
				return;
			}
		}
		mask  = p + hl - 4;
		avail = n - pos - hl;
		if (op >= 8) {
			ws_control  ctl;
			ws_control *e = &ctl;

			if (avail < len) {
				return;
			}
			memset(e, 0, sizeof(*e));
			e->opcode = (uint8_t)op;
			e->len    = (uint8_t)len;
			for (size_t i = 0; i < len; i++) {
				e->payload[i] = p[hl + i] ^ mask[i % 4];
			}
			if (op == 8) {
				e->close_code = 1005;
				if (len == 1) {
					r->error = 1;
					return;
				}
				if (len >= 2) {
					e->close_code
					    = (uint16_t)(e->payload[0] * 256 + e->payload[1]);
					if (!ref_code_ok(e->close_code)) {
						r->error = 1;
						return;
					}
				}
				add_event(r, e);
				return; // nothing after a close frame
			}
			add_event(r, e);
			pos += hl + (size_t)len;
			continue;
		}
		for (size_t i = 0; i < len && i < avail; i++) {
			r->data[r->n++] = p[hl + i] ^ mask[i % 4];
		}
		if (avail < len) {
			return;
		}
		pos += hl + (size_t)len;
		frag = !fin;
	}
}

// Next chunk size for the feeding pattern chosen by the first input byte.
static size_t next_chunk(uint8_t mode, uint32_t *rng)
{
	switch (mode >> 6) {
	case 0:
		return (size_t)(mode & 0x3F) + 1;
	case 1:
		return 1;
	case 2:
		return (size_t)-1; // everything at once
	default:
		*rng = *rng * 1103515245u + 12345u;
		return (size_t)((*rng >> 16) % 23) + 1;
	}
}

// Feeds in[0..n) to the decoder like the transport does and records into r
// (whose data has room for n bytes). With consume set, decoded bytes are
// taken out of the buffer after each batch and the undecoded rest moved to
// the front.
static void feed(const uint8_t *in, size_t n, uint8_t mode, bool consume, result *r)
{
	uint8_t   *buf = malloc(n > 0 ? n : 1); // exactly the input's size
	size_t     len = 0, out = 0, raw = 0, fed = 0;
	uint32_t   rng = mode;
	ws_decoder d;
	bool       stop = false;

	CHECK(buf != NULL);
	memset(&d, 0, sizeof(d));
	while (fed < n && !stop) {
		size_t c = next_chunk(mode, &rng);

		if (c > n - fed) {
			c = n - fed;
		}
		CHECK(len + c <= n);
		memcpy(buf + len, in + fed, c);
		len += c;
		fed += c;
		for (;;) {
			ws_control ctl;
			size_t     o0 = out, r0 = raw;
			int        rc = ws_decode(&d, buf, len, &out, &raw, &ctl);

			CHECK(out <= raw && raw <= len);
			CHECK(out >= o0 && raw >= r0);
			// A decoded byte costs a raw byte: the gap only grows.
			CHECK(raw - out >= r0 - o0);
			if (rc == WS_DEC_OK) {
				CHECK(!d.closed);
				break;
			}
			if (rc == WS_DEC_ERROR) {
				CHECK(d.closed);
				CHECK(ctl.close_code == 1002 || ctl.close_code == 1003);
				r->error = 1;
				r->code  = ctl.close_code;
				stop     = true;
				break;
			}
			CHECK(rc == WS_DEC_CONTROL);
			CHECK(ctl.opcode >= WS_OP_CLOSE && ctl.opcode <= WS_OP_PONG);
			CHECK(ctl.len <= 125);
			add_event(r, &ctl);
			if (ctl.opcode == WS_OP_CLOSE) {
				CHECK(d.closed);
				CHECK(ws_decode(&d, buf, len, &out, &raw, &ctl) == WS_DEC_ERROR);
				stop = true;
				break;
			}
		}
		if (consume) {
			memcpy(r->data + r->n, buf, out);
			r->n += out;
			memmove(buf, buf + raw, len - raw);
			len -= raw;
			out = raw = 0;
		}
	}
	if (!consume) {
		memcpy(r->data, buf, out);
		r->n = out;
	}
	free(buf);
}

// Compares the chunked run with the reference.
static void compare(const result *a, const result *b)
{
	CHECK(a->n == b->n);
	CHECK(memcmp(a->data, b->data, a->n) == 0);
	CHECK(a->nev == b->nev);
	CHECK(a->ev_hash == b->ev_hash);
	CHECK(a->error == b->error);
	if (a->error) {
		CHECK(a->code == b->code);
	}
}

static result ref, got;

// libFuzzer entry point. Always returns 0.
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_handshake(data, size, "/mqtt");
	fuzz_handshake(data, size, NULL);

	if (size >= 1) {
		const uint8_t *in = data + 1;
		size_t         n  = size - 1;

		memset(&ref, 0, sizeof(ref));
		ref.data = malloc(n + 1);
		CHECK(ref.data != NULL);
		ref_decode(in, n, &ref);
		for (int consume = 0; consume < 2; consume++) {
			memset(&got, 0, sizeof(got));
			got.data = malloc(n + 1);
			CHECK(got.data != NULL);
			feed(in, n, data[0], consume, &got);
			compare(&got, &ref);
			free(got.data);
		}
		free(ref.data);
	}

	if (size >= 8) {
		uint64_t v = 0;
		uint8_t  h[10];
		size_t   hl;

		for (int i = 0; i < 8; i++) {
			v = v << 8 | data[i];
		}
		v >>= data[0] & 63; // small lengths too
		hl = ws_frame_header(h, data[1], v);
		CHECK(hl == (v <= 125 ? 2u : v <= 0xFFFF ? 4u : 10u));
		CHECK(h[0] == (0x80 | (data[1] & 0x0F)) && (h[1] & 0x80) == 0);
		if (hl == 2) {
			CHECK(h[1] == v);
		} else if (hl == 4) {
			CHECK(h[1] == 126 && ((uint64_t)h[2] << 8 | h[3]) == v);
		} else {
			uint64_t w = 0;
			for (int i = 0; i < 8; i++) {
				w = w << 8 | h[2 + i];
			}
			CHECK(h[1] == 127 && w == v);
		}
	}
	return 0;
}
