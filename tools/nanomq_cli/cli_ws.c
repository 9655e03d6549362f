// The client side of MQTT over WebSocket; see cli_ws.h.
#include "tools/nanomq_cli/cli_ws.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include <mbedtls/base64.h>

#include "nng/codec/ws_codec.h"

// Random bytes for keys and masks (not secret; the kernel's generator).
static void random_bytes(uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t got = getrandom(p, n, 0);
		if (got <= 0) {
			// Unreachable in practice; a fixed value still works.
			memset(p, 0x5a, n);
			return;
		}
		p += got;
		n -= (size_t)got;
	}
}

// Writes the upgrade request; see cli_ws.h.
size_t cli_ws_request(
    cli_ws *ws, const char *host, uint16_t port, const char *path, char *out, size_t cap)
{
	uint8_t raw[16];
	size_t  klen = 0;
	memset(ws, 0, sizeof(*ws));
	random_bytes(raw, sizeof(raw));
	if (mbedtls_base64_encode(
	        (unsigned char *)ws->key, sizeof(ws->key), &klen, raw, sizeof(raw))
	    != 0) {
		return 0;
	}
	bool v6 = strchr(host, ':') != NULL;
	int  n  = snprintf(out, cap,
	      "GET %s HTTP/1.1\r\nHost: %s%s%s:%u\r\nUpgrade: websocket\r\n"
	        "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
	        "Sec-WebSocket-Protocol: mqtt\r\n\r\n",
	      path, v6 ? "[" : "", host, v6 ? "]" : "", port, ws->key);
	return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

// Finds header `name` in the answer's header block; copies its value
// (trimmed) into val. Returns true if found.
static bool header(const char *block, const char *name, char *val, size_t vlen)
{
	size_t      nl = strlen(name);
	const char *p  = strchr(block, '\n');
	while (p != NULL && p[1] != '\0') {
		p++;
		if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
			const char *v = p + nl + 1;
			while (*v == ' ' || *v == '\t') {
				v++;
			}
			size_t n = strcspn(v, "\r\n");
			while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t')) {
				n--;
			}
			snprintf(val, vlen, "%.*s", (int)n, v);
			return true;
		}
		p = strchr(p, '\n');
	}
	return false;
}

// Feeds the server's answer; see cli_ws.h.
int cli_ws_response(
    cli_ws *ws, const uint8_t *buf, size_t len, size_t *used, char *why, size_t whylen)
{
	size_t take = 0;
	*used       = 0;
	// Copy byte by byte until the blank line; what follows is frames.
	while (take < len) {
		if (ws->resp_len + 1 >= sizeof(ws->resp)) {
			snprintf(why, whylen, "WebSocket: upgrade answer too long");
			return -1;
		}
		ws->resp[ws->resp_len++] = (char)buf[take++];
		ws->resp[ws->resp_len]   = '\0';
		if (ws->resp_len >= 4 && memcmp(ws->resp + ws->resp_len - 4, "\r\n\r\n", 4) == 0) {
			break;
		}
		if (ws->resp_len >= 2 && memcmp(ws->resp + ws->resp_len - 2, "\n\n", 2) == 0) {
			break;
		}
	}
	*used = take;
	if (!(ws->resp_len >= 2 && ws->resp[ws->resp_len - 1] == '\n'
	        && (ws->resp[ws->resp_len - 2] == '\n'
	            || (ws->resp_len >= 4
	                && memcmp(ws->resp + ws->resp_len - 4, "\r\n\r\n", 4) == 0)))) {
		return 0;
	}
	int status = 0;
	if (sscanf(ws->resp, "HTTP/1.1 %d", &status) != 1 || status != 101) {
		size_t n = strcspn(ws->resp, "\r\n");
		snprintf(why, whylen, "WebSocket: upgrade refused: %.*s", (int)(n > 80 ? 80 : n),
		    ws->resp);
		return -1;
	}
	char want[29], got[64], proto[64];
	ws_accept_key(ws->key, strlen(ws->key), want);
	if (!header(ws->resp, "Sec-WebSocket-Accept", got, sizeof(got)) || strcmp(got, want) != 0) {
		snprintf(why, whylen, "WebSocket: wrong or missing Sec-WebSocket-Accept");
		return -1;
	}
	if (header(ws->resp, "Sec-WebSocket-Protocol", proto, sizeof(proto))
	    && strcasecmp(proto, "mqtt") != 0) {
		snprintf(why, whylen, "WebSocket: subprotocol \"%s\", not mqtt", proto);
		return -1;
	}
	ws->open = true;
	return 1;
}

// Parses a complete frame header in ws->hdr. Returns 1 when it is complete
// (fields set), 0 if more bytes are needed, -1 on a bad header.
static int parse_header(cli_ws *ws, char *why, size_t whylen)
{
	if (ws->hdr_len < 2) {
		return 0;
	}
	uint8_t b0 = ws->hdr[0], b1 = ws->hdr[1];
	size_t  need = 2
	    + ((b1 & 0x7f) == 126        ? 2
	            : (b1 & 0x7f) == 127 ? 8
	                                 : 0)
	    + (b1 & 0x80 ? 4 : 0);
	uint64_t n = b1 & 0x7f;
	if (ws->hdr_len < need) {
		return 0;
	}
	if ((b0 & 0x70) != 0) {
		snprintf(why, whylen, "WebSocket: reserved bits set by the server");
		return -1;
	}
	size_t p = 2;
	if (n == 126) {
		n = ((uint64_t)ws->hdr[2] << 8) | ws->hdr[3];
		p = 4;
	} else if (n == 127) {
		n = 0;
		for (int i = 0; i < 8; i++) {
			n = (n << 8) | ws->hdr[2 + i];
		}
		p = 10;
	}
	ws->opcode = b0 & 0x0f;
	ws->masked = (b1 & 0x80) != 0;
	if (ws->masked) {
		memcpy(ws->mask, ws->hdr + p, 4);
	}
	if (ws->opcode >= 8 && (n > 125 || !(b0 & 0x80))) {
		snprintf(why, whylen, "WebSocket: bad control frame");
		return -1;
	}
	if (ws->opcode == WS_OP_TEXT) {
		snprintf(why, whylen, "WebSocket: text frame (MQTT needs binary)");
		return -1;
	}
	ws->left    = n;
	ws->mpos    = 0;
	ws->ctl_len = 0;
	return 1;
}

// Acts on a complete control frame.
static void control_done(cli_ws *ws)
{
	if (ws->opcode == WS_OP_PING) {
		ws->want_pong = true;
		ws->pong_len  = ws->ctl_len;
		memcpy(ws->pong, ws->ctl, ws->ctl_len);
	} else if (ws->opcode == WS_OP_CLOSE) {
		ws->closed = true;
	}
}

// Unframes in place; see cli_ws.h.
long cli_ws_unframe(cli_ws *ws, uint8_t *buf, size_t len, char *why, size_t whylen)
{
	size_t in = 0, out = 0;
	while (in < len) {
		if (!ws->in_frame) {
			// Collect a header.
			while (in < len && ws->hdr_len < CLI_WS_HDR_MAX) {
				ws->hdr[ws->hdr_len++] = buf[in++];
				int r                  = parse_header(ws, why, whylen);
				if (r < 0) {
					return -1;
				}
				if (r == 1) {
					ws->hdr_len = 0;
					break;
				}
			}
			if (ws->hdr_len > 0) {
				continue; // header incomplete: need more input
			}
			if (ws->left == 0) {
				if (ws->opcode >= 8) {
					control_done(ws);
				}
				continue;
			}
			ws->in_frame = true;
		}
		size_t n = len - in;
		if (n > ws->left) {
			n = (size_t)ws->left;
		}
		for (size_t i = 0; i < n; i++) {
			uint8_t b = buf[in + i];
			if (ws->masked) {
				b ^= ws->mask[(ws->mpos + i) & 3];
			}
			if (ws->opcode >= 8) {
				ws->ctl[ws->ctl_len++] = b;
			} else {
				buf[out++] = b;
			}
		}
		in += n;
		ws->mpos += n;
		ws->left -= n;
		if (ws->left == 0) {
			if (ws->opcode >= 8) {
				control_done(ws);
			}
			ws->in_frame = false;
			ws->ctl_len  = 0;
		}
	}
	return (long)out;
}

// Builds a masked frame header; see cli_ws.h.
size_t cli_ws_frame(uint8_t hdr[CLI_WS_HDR_MAX], uint8_t opcode, uint8_t *payload, size_t len)
{
	size_t p = 0;
	hdr[p++] = (uint8_t)(0x80 | opcode);
	if (len < 126) {
		hdr[p++] = (uint8_t)(0x80 | len);
	} else if (len < 65536) {
		hdr[p++] = 0x80 | 126;
		hdr[p++] = (uint8_t)(len >> 8);
		hdr[p++] = (uint8_t)len;
	} else {
		hdr[p++] = 0x80 | 127;
		for (int i = 7; i >= 0; i--) {
			hdr[p++] = (uint8_t)((uint64_t)len >> (8 * i));
		}
	}
	uint8_t *mask = hdr + p;
	random_bytes(mask, 4);
	p += 4;
	for (size_t i = 0; i < len; i++) {
		payload[i] ^= mask[i & 3];
	}
	return p;
}
