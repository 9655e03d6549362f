// MQTT over WebSocket (RFC 6455), server side: the HTTP/1.1 upgrade request
// and the frame codec. Pure functions over the caller's buffers: no I/O, no
// allocation, no global state (see ws_codec.h for the contract).

#include <string.h>

#include <mbedtls/base64.h>
#include <mbedtls/sha1.h>

#include "nng/codec/ws_codec.h"

// ---------------------------------------------------------------------------
// Handshake.

// RFC 6455 section 1.3.
static const char ws_guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

// Returns c in lower case if it is an ASCII capital letter, else c.
static int ascii_lower(int c)
{
	return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c;
}

// Returns true if p[0..n) equals the C string s, ignoring ASCII case.
static bool span_ieq(const uint8_t *p, size_t n, const char *s)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (s[i] == '\0' || ascii_lower(p[i]) != ascii_lower((uint8_t)s[i])) {
			return false;
		}
	}
	return s[i] == '\0';
}

// Returns true if p[0..n) equals the C string s exactly.
static bool span_eq(const uint8_t *p, size_t n, const char *s)
{
	return strlen(s) == n && memcmp(p, s, n) == 0;
}

// Returns true for a character allowed in a header name (RFC 7230 tchar).
static bool is_tchar(uint8_t c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
		return true;
	}
	return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

// Returns true for optional whitespace (space, horizontal tab).
static bool is_ows(uint8_t c)
{
	return c == ' ' || c == '\t';
}

// Returns true for a control character that may not appear in a request
// line or a header value (every C0 character but tab, and DEL).
static bool is_ctl(uint8_t c)
{
	return (c < 0x20 && c != '\t') || c == 0x7F;
}

// Returns the length of the header block at the start of buf[0..len) (up to
// and including the empty line that ends it), 0 if that line has not
// arrived. Lines end in CRLF or, tolerated (RFC 7230 section 3.5), in LF.
static size_t hs_block_end(const uint8_t *buf, size_t len)
{
	const uint8_t *p = buf;
	const uint8_t *nl;

	while ((nl = memchr(p, '\n', len - (size_t)(p - buf))) != NULL) {
		size_t i = (size_t)(nl - buf) + 1;

		if (i < len && buf[i] == '\n') {
			return i + 1;
		}
		if (i + 1 < len && buf[i] == '\r' && buf[i + 1] == '\n') {
			return i + 2;
		}
		p = nl + 1;
	}
	return 0;
}

// Returns the next line of buf[*pos..end) without its line end and advances
// *pos past it. The block is known to end in LF.
static const uint8_t *hs_next_line(const uint8_t *buf, size_t end, size_t *pos, size_t *n)
{
	const uint8_t *p  = buf + *pos;
	const uint8_t *nl = memchr(p, '\n', end - *pos);
	size_t         l  = (size_t)(nl - p);

	*pos += l + 1;
	if (l > 0 && p[l - 1] == '\r') {
		l--;
	}
	*n = l;
	return p;
}

// Returns the next non-empty element of the comma-separated list in
// [*p, e), with optional whitespace trimmed, and advances *p past it; false
// when the list holds no more elements.
static bool list_next(const uint8_t **p, const uint8_t *e, const uint8_t **tok, size_t *n)
{
	while (*p < e) {
		const uint8_t *s = *p;
		const uint8_t *c = memchr(s, ',', (size_t)(e - s));
		const uint8_t *t = c != NULL ? c : e;

		*p = c != NULL ? c + 1 : e;
		while (s < t && is_ows(*s)) {
			s++;
		}
		while (t > s && is_ows(t[-1])) {
			t--;
		}
		if (t > s) {
			*tok = s;
			*n   = (size_t)(t - s);
			return true;
		}
	}
	return false;
}

// Returns true if the comma-separated list in p[0..n) holds token, compared
// without case.
static bool list_has(const uint8_t *p, size_t n, const char *token)
{
	const uint8_t *e = p + n;
	const uint8_t *t;
	size_t         tn;

	while (list_next(&p, e, &t, &tn)) {
		if (span_ieq(t, tn, token)) {
			return true;
		}
	}
	return false;
}

// Returns true if p[0..n) is the base64 form of exactly 16 bytes, as a
// Sec-WebSocket-Key must be (RFC 6455 section 4.1).
static bool key_valid(const uint8_t *p, size_t n)
{
	unsigned char raw[18];
	size_t        olen = 0;

	// 16 bytes are 22 characters and "==". The length check also keeps
	// out the line breaks mbedtls_base64_decode would skip.
	if (n != 24) {
		return false;
	}
	return mbedtls_base64_decode(raw, sizeof(raw), &olen, p, n) == 0 && olen == 16;
}

// Sets the rejection status and returns WS_HS_REJECT.
static int hs_reject(ws_handshake *h, int status)
{
	h->status = status;
	return WS_HS_REJECT;
}

// Checks the request line "GET <target> HTTP/1.x" against h->path. Returns
// 0 if it is acceptable, else the HTTP status of the rejection.
static int hs_request_line(const ws_handshake *h, const uint8_t *l, size_t n)
{
	const uint8_t *sp1, *sp2, *tgt, *ver, *path, *te, *q;
	size_t         tn, vn;

	for (size_t i = 0; i < n; i++) {
		if (is_ctl(l[i]) || l[i] == '\t') {
			return 400;
		}
	}
	if ((sp1 = memchr(l, ' ', n)) == NULL || sp1 == l) {
		return 400;
	}
	tgt = sp1 + 1;
	if ((sp2 = memchr(tgt, ' ', (size_t)(l + n - tgt))) == NULL || sp2 == tgt) {
		return 400;
	}
	tn  = (size_t)(sp2 - tgt);
	ver = sp2 + 1;
	vn  = (size_t)(l + n - ver);

	// HTTP-version = "HTTP/" DIGIT "." DIGIT, case-sensitive.
	if (vn != 8 || memcmp(ver, "HTTP/", 5) != 0 || ver[5] < '0' || ver[5] > '9' || ver[6] != '.'
	    || ver[7] < '0' || ver[7] > '9') {
		return 400;
	}
	if (ver[5] != '1' || ver[7] == '0') {
		return 505;
	}
	if (!span_eq(l, (size_t)(sp1 - l), "GET")) {
		return 405;
	}

	// origin-form ("/mqtt?x=1") or absolute-form ("ws://host/mqtt").
	te = tgt + tn;
	if (tgt[0] == '/') {
		path = tgt;
	} else {
		const uint8_t *s = tgt;
		while (s + 3 <= te && memcmp(s, "://", 3) != 0) {
			s++;
		}
		if (s == tgt || s + 3 > te) {
			return 400;
		}
		path = s + 3;
		while (path < te && *path != '/' && *path != '?' && *path != '#') {
			path++;
		}
		if (path == te || *path != '/') {
			path = (const uint8_t *)"/";
			te   = path + 1;
		}
	}
	for (q = path; q < te && *q != '?' && *q != '#'; q++) { }
	if (h->path != NULL && !span_eq(path, (size_t)(q - path), h->path)) {
		return 404;
	}
	return 0;
}

int ws_handshake_parse(ws_handshake *h, const uint8_t *buf, size_t len, size_t *used)
{
	size_t         end, pos = 0, n;
	const uint8_t *l;
	const uint8_t *key   = NULL;
	const uint8_t *proto = NULL;
	size_t         key_n = 0, proto_n = 0;
	int            keys    = 0, status;
	bool           upgrade = false, connection = false, offered = false;
	bool           version_seen = false, version_ok = true;

	h->status      = 0;
	h->accept[0]   = '\0';
	h->protocol[0] = '\0';
	*used          = 0;

	end = hs_block_end(buf, len < WS_HS_MAX ? len : WS_HS_MAX);
	if (end == 0) {
		return len >= WS_HS_MAX ? hs_reject(h, 431) : WS_HS_NEED_MORE;
	}

	l = hs_next_line(buf, end, &pos, &n);
	if ((status = hs_request_line(h, l, n)) != 0) {
		return hs_reject(h, status);
	}

	for (;;) {
		const uint8_t *colon, *v, *ve;

		l = hs_next_line(buf, end, &pos, &n);
		if (n == 0) {
			break; // the empty line ending the block
		}
		// A folded line (obsolete, RFC 7230 section 3.2.4) or a name
		// with whitespace before its colon is refused.
		if ((colon = memchr(l, ':', n)) == NULL || colon == l) {
			return hs_reject(h, 400);
		}
		for (const uint8_t *c = l; c < colon; c++) {
			if (!is_tchar(*c)) {
				return hs_reject(h, 400);
			}
		}
		v  = colon + 1;
		ve = l + n;
		for (const uint8_t *c = v; c < ve; c++) {
			if (is_ctl(*c)) {
				return hs_reject(h, 400);
			}
		}
		while (v < ve && is_ows(*v)) {
			v++;
		}
		while (ve > v && is_ows(ve[-1])) {
			ve--;
		}

		size_t nl = (size_t)(colon - l);
		size_t vn = (size_t)(ve - v);
		if (span_ieq(l, nl, "upgrade")) {
			upgrade = upgrade || list_has(v, vn, "websocket");
		} else if (span_ieq(l, nl, "connection")) {
			connection = connection || list_has(v, vn, "upgrade");
		} else if (span_ieq(l, nl, "sec-websocket-key")) {
			keys++;
			key   = v;
			key_n = vn;
		} else if (span_ieq(l, nl, "sec-websocket-version")) {
			version_seen = true;
			version_ok   = version_ok && span_eq(v, vn, "13");
		} else if (span_ieq(l, nl, "sec-websocket-protocol")) {
			const uint8_t *t;
			size_t         tn;

			while (list_next(&v, ve, &t, &tn)) {
				offered = true;
				if (proto == NULL
				    && (span_ieq(t, tn, "mqtt") || span_ieq(t, tn, "mqttv3.1"))) {
					proto   = t;
					proto_n = tn;
				}
			}
		}
	}

	if (!upgrade || !connection) {
		return hs_reject(h, 400);
	}
	if (!version_seen || !version_ok) {
		return hs_reject(h, 426);
	}
	if (keys != 1 || !key_valid(key, key_n)) {
		return hs_reject(h, 400);
	}
	if (offered && proto == NULL) {
		return hs_reject(h, 400);
	}
	if (proto != NULL) {
		memcpy(h->protocol, proto, proto_n); // at most 8 bytes
		h->protocol[proto_n] = '\0';
	}
	ws_accept_key((const char *)key, key_n, h->accept);
	*used = end;
	return WS_HS_OK;
}

// Appends the C string s to out[*n..cap); returns false (and leaves *n
// past cap) if it does not fit.
static bool put(char *out, size_t cap, size_t *n, const char *s)
{
	size_t l = strlen(s);

	if (*n + l > cap) {
		*n = cap + 1;
		return false;
	}
	memcpy(out + *n, s, l);
	*n += l;
	return true;
}

size_t ws_handshake_response(const ws_handshake *h, bool ok, char *out, size_t cap)
{
	size_t n = 0;

	if (ok) {
		put(out, cap, &n,
		    "HTTP/1.1 101 Switching Protocols\r\n"
		    "Upgrade: websocket\r\n"
		    "Connection: Upgrade\r\n"
		    "Sec-WebSocket-Accept: ");
		put(out, cap, &n, h->accept);
		put(out, cap, &n, "\r\n");
		if (h->protocol[0] != '\0') {
			put(out, cap, &n, "Sec-WebSocket-Protocol: ");
			put(out, cap, &n, h->protocol);
			put(out, cap, &n, "\r\n");
		}
	} else {
		const char *line;

		switch (h->status) {
		case 404:
			line = "HTTP/1.1 404 Not Found\r\n";
			break;
		case 405:
			line = "HTTP/1.1 405 Method Not Allowed\r\n"
			       "Allow: GET\r\n";
			break;
		case 426:
			line = "HTTP/1.1 426 Upgrade Required\r\n"
			       "Upgrade: websocket\r\n"
			       "Sec-WebSocket-Version: 13\r\n";
			break;
		case 431:
			line = "HTTP/1.1 431 Request Header Fields Too Large\r\n";
			break;
		case 505:
			line = "HTTP/1.1 505 HTTP Version Not Supported\r\n";
			break;
		default:
			line = "HTTP/1.1 400 Bad Request\r\n";
			break;
		}
		put(out, cap, &n, line);
		put(out, cap, &n,
		    "Connection: close\r\n"
		    "Content-Length: 0\r\n");
	}
	put(out, cap, &n, "\r\n");
	// Room for a terminating NUL too, which makes the text printable.
	if (n >= cap) {
		return 0;
	}
	out[n] = '\0';
	return n;
}

void ws_accept_key(const char *key, size_t key_len, char out[29])
{
	mbedtls_sha1_context ctx;
	unsigned char        digest[20];
	size_t               olen = 0;

	mbedtls_sha1_init(&ctx);
	// SHA-1 without hardware hooks cannot fail; the results are ignored.
	(void)mbedtls_sha1_starts_ret(&ctx);
	(void)mbedtls_sha1_update_ret(&ctx, (const unsigned char *)key, key_len);
	(void)mbedtls_sha1_update_ret(&ctx, (const unsigned char *)ws_guid, sizeof(ws_guid) - 1);
	(void)mbedtls_sha1_finish_ret(&ctx, digest);
	mbedtls_sha1_free(&ctx);
	// 20 bytes are 28 characters and a NUL: exactly out's size.
	if (mbedtls_base64_encode((unsigned char *)out, 29, &olen, digest, sizeof(digest)) != 0) {
		out[0] = '\0';
	}
}

// ---------------------------------------------------------------------------
// Frames.

// Unmasks n bytes from src to dst (dst <= src; the regions may overlap),
// starting at position *off of the mask, and advances *off. Eight bytes at a
// time: each word is loaded before it is stored, and the store never passes
// a byte not yet loaded because dst does not overtake src.
static void unmask(uint8_t *dst, const uint8_t *src, size_t n, const uint8_t mask[4], uint8_t *off)
{
	size_t o = *off;
	size_t i = 0;

	if (n >= 8) {
		uint8_t  m[8];
		uint64_t mw, w;

		for (size_t k = 0; k < 8; k++) {
			m[k] = mask[(o + k) & 3];
		}
		memcpy(&mw, m, 8);
		for (; i + 8 <= n; i += 8) {
			memcpy(&w, src + i, 8);
			w ^= mw;
			memcpy(dst + i, &w, 8);
		}
	}
	for (; i < n; i++) {
		dst[i] = src[i] ^ mask[(o + i) & 3];
	}
	*off = (uint8_t)((o + n) & 3);
}

// Puts the decoder in its final state and reports code; returns
// WS_DEC_ERROR.
static int dec_fail(ws_decoder *d, ws_control *ctl, uint16_t code)
{
	d->closed       = true;
	d->in_payload   = false;
	ctl->opcode     = 0;
	ctl->len        = 0;
	ctl->close_code = code;
	return WS_DEC_ERROR;
}

// Returns true for a status code a close frame may carry (RFC 6455 section
// 7.4 and the IANA registry: 1004 is reserved, 1005, 1006 and 1015 are
// never sent, 1016-2999 are unassigned, 3000-4999 belong to applications).
static bool close_code_valid(uint16_t c)
{
	return (c >= 1000 && c <= 1003) || (c >= 1007 && c <= 1014) || (c >= 3000 && c <= 4999);
}

int ws_decode(ws_decoder *d, uint8_t *buf, size_t len, size_t *out, size_t *raw, ws_control *ctl)
{
	if (d->closed || *out > *raw || *raw > len) {
		return dec_fail(d, ctl, WS_CLOSE_PROTOCOL);
	}
	for (;;) {
		size_t         avail = len - *raw;
		const uint8_t *p     = buf + *raw;
		uint8_t        b0, b1, op, len7, mask[4];
		bool           fin;
		size_t         hl;
		uint64_t       plen;

		if (d->in_payload) {
			size_t n = avail < d->left ? avail : (size_t)d->left;

			unmask(buf + *out, p, n, d->mask, &d->mask_off);
			*out += n;
			*raw += n;
			d->left -= n;
			if (d->left > 0) {
				return WS_DEC_OK;
			}
			d->in_payload = false;
			continue;
		}

		// Everything the first two bytes tell is checked as soon as they
		// are here.
		if (avail < 2) {
			return WS_DEC_OK;
		}
		b0   = p[0];
		b1   = p[1];
		fin  = (b0 & 0x80) != 0;
		op   = b0 & 0x0F;
		len7 = b1 & 0x7F;
		if ((b0 & 0x70) != 0 || (b1 & 0x80) == 0) {
			return dec_fail(d, ctl, WS_CLOSE_PROTOCOL);
		}
		switch (op) {
		case WS_OP_TEXT:
			return dec_fail(d, ctl, WS_CLOSE_DATA_TYPE);
		case WS_OP_BINARY:
			if (d->fragmented) {
				return dec_fail(d, ctl, WS_CLOSE_PROTOCOL);
			}
			break;
		case WS_OP_CONT:
			if (!d->fragmented) {
				return dec_fail(d, ctl, WS_CLOSE_PROTOCOL);
			}
			break;
		case WS_OP_CLOSE:
		case WS_OP_PING:
		case WS_OP_PONG:
			if (!fin || len7 > 125) {
				return dec_fail(d, ctl, WS_CLOSE_PROTOCOL);
			}
			break;
		default:
			return dec_fail(d, ctl, WS_CLOSE_PROTOCOL);
		}

		hl = len7 == 126 ? 8 : len7 == 127 ? 14 : 6;
		if (avail < hl) {
			return WS_DEC_OK;
		}
		plen = len7;
		if (len7 == 126) {
			plen = (uint64_t)p[2] << 8 | p[3];
		} else if (len7 == 127) {
			plen = 0;
			for (size_t i = 2; i < 10; i++) {
				plen = plen << 8 | p[i];
			}
			if (plen >> 63 != 0) {
				return dec_fail(d, ctl, WS_CLOSE_PROTOCOL);
			}
		}
		// A length not in its shortest form is accepted.
		memcpy(mask, p + hl - 4, 4);

		if (op >= WS_OP_CLOSE) {
			uint8_t off = 0;

			if (avail - hl < plen) {
				return WS_DEC_OK; // wait for the whole control frame
			}
			unmask(ctl->payload, p + hl, (size_t)plen, mask, &off);
			ctl->opcode     = op;
			ctl->len        = (uint8_t)plen;
			ctl->close_code = 0;
			if (op == WS_OP_CLOSE) {
				uint16_t code = 1005;

				if (plen == 1) {
					return dec_fail(d, ctl, WS_CLOSE_PROTOCOL);
				}
				if (plen >= 2) {
					code = (uint16_t)(ctl->payload[0] << 8 | ctl->payload[1]);
					if (!close_code_valid(code)) {
						return dec_fail(d, ctl, WS_CLOSE_PROTOCOL);
					}
				}
				ctl->close_code = code;
				d->closed       = true;
			}
			*raw += hl + (size_t)plen;
			return WS_DEC_CONTROL;
		}

		*raw += hl;
		d->fragmented = !fin;
		d->left       = plen;
		d->in_payload = plen > 0;
		d->mask_off   = 0;
		memcpy(d->mask, mask, 4);
	}
}

size_t ws_frame_header(uint8_t out[10], uint8_t opcode, uint64_t payload_len)
{
	out[0] = (uint8_t)(0x80 | (opcode & 0x0F));
	if (payload_len <= 125) {
		out[1] = (uint8_t)payload_len;
		return 2;
	}
	if (payload_len <= 0xFFFF) {
		out[1] = 126;
		out[2] = (uint8_t)(payload_len >> 8);
		out[3] = (uint8_t)payload_len;
		return 4;
	}
	out[1] = 127;
	for (int i = 0; i < 8; i++) {
		out[2 + i] = (uint8_t)(payload_len >> (56 - 8 * i));
	}
	return 10;
}
