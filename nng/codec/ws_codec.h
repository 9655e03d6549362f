// MQTT over WebSocket (RFC 6455), server side: the HTTP/1.1 upgrade request
// and the frame codec. Pure functions over byte buffers: no I/O, no
// allocation, no global state. The transport (nng/transport/conn_ws.c) feeds
// them the bytes of a connection.
//
// MQTT rules applied here (MQTT 5.0 §6, 3.1.1 §6): data travels in binary
// frames only (a text frame is a protocol error); an MQTT packet may span
// frames and a frame may hold several packets, so the decoder turns the
// frames back into one plain byte stream.
#ifndef NMQ_WS_CODEC_H
#define NMQ_WS_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Largest upgrade request accepted (request line and headers).
#define WS_HS_MAX 8192
// Room a response needs in ws_handshake_response.
#define WS_HS_RESPONSE_MAX 256

enum {
	WS_HS_NEED_MORE = 0, // the header block is not complete yet
	WS_HS_OK        = 1, // a valid upgrade: send the 101 response
	WS_HS_REJECT    = -1, // send the error response (h->status), then close
};

typedef struct ws_handshake {
	// In: the path the listener serves (e.g. "/mqtt"); the query string of
	// the request is ignored. NULL accepts any path.
	const char *path;
	// Out:
	int  status; // HTTP status of a rejection: 400, 404, 405, 426, 431, 505
	char accept[32]; // Sec-WebSocket-Accept value (NUL-terminated)
	char protocol[16]; // the subprotocol chosen, "" if the client offered none
} ws_handshake;

// Parses the upgrade request in buf[0..len). Returns WS_HS_NEED_MORE while
// the blank line ending the headers has not arrived (and len < WS_HS_MAX),
// WS_HS_OK with *used set to the request's length (bytes after it already
// belong to the WebSocket stream), or WS_HS_REJECT with h->status set.
// *used is 0 and h->accept and h->protocol are "" unless WS_HS_OK. Only
// buf[0..WS_HS_MAX) is ever read, and each call parses from the start (the
// caller keeps no parser state).
//
// Accepted: "GET <path> HTTP/1.1" (any 1.x minor >= 1), header names in any
// case, any Host (or none), Upgrade containing the token "websocket",
// Connection containing the token "upgrade", a Sec-WebSocket-Key that is the
// base64 form of 16 bytes, Sec-WebSocket-Version 13 (426 otherwise).
// Sec-WebSocket-Protocol may be repeated and comma-separated; the first
// offered of "mqtt" and "mqttv3.1" (compared without case, echoed as
// offered) is chosen; an offer with neither is rejected (400); no offer at
// all is accepted without a subprotocol (an empty header offers nothing).
//
// Rejections, checked in this order: a request (request line and headers,
// through the blank line) longer than WS_HS_MAX -> 431; a malformed request
// line -> 400; an HTTP version other than 1.1 to 1.9 -> 505; a method
// other than GET (case-sensitive) -> 405; a request target that is not
// origin-form ("/...") or absolute-form ("ws://host/...") -> 400, whose path
// (up to '?' or '#') differs from h->path byte for byte -> 404; a malformed
// header line (no colon, a name that is not a token, whitespace before the
// colon, a folded line, a control character in a value) -> 400; Upgrade or
// Connection without their token -> 400; Sec-WebSocket-Version absent or
// not exactly "13" -> 426; Sec-WebSocket-Key absent, repeated or invalid ->
// 400; an offer without MQTT -> 400. Lines may also end in LF alone.
int ws_handshake_parse(ws_handshake *h, const uint8_t *buf, size_t len, size_t *used);

// Writes the response for a parsed request: "101 Switching Protocols" with
// the accept key and the subprotocol after WS_HS_OK, or the error status
// (with "Sec-WebSocket-Version: 13" for 426, "Allow: GET" for 405; an
// unknown status is sent as 400) after WS_HS_REJECT. The text is
// NUL-terminated. Returns its length (without the NUL), 0 if cap is too
// small for the text and its NUL.
size_t ws_handshake_response(const ws_handshake *h, bool ok, char *out, size_t cap);

// The Sec-WebSocket-Accept value for a key: base64(SHA-1(key + GUID)).
// out must hold 29 bytes (28 characters and a NUL).
void ws_accept_key(const char *key, size_t key_len, char out[29]);

// Opcodes.
enum {
	WS_OP_CONT   = 0x0,
	WS_OP_TEXT   = 0x1,
	WS_OP_BINARY = 0x2,
	WS_OP_CLOSE  = 0x8,
	WS_OP_PING   = 0x9,
	WS_OP_PONG   = 0xA,
};

// Close status codes the decoder reports.
enum {
	WS_CLOSE_NORMAL    = 1000,
	WS_CLOSE_PROTOCOL  = 1002,
	WS_CLOSE_DATA_TYPE = 1003, // a text frame
	WS_CLOSE_TOO_BIG   = 1009,
};

// Decoder state for client-to-server frames; zero it to start.
typedef struct ws_decoder {
	uint64_t left; // payload bytes still to come in the current data frame
	uint8_t  mask[4];
	uint8_t  mask_off; // position in the mask of the next payload byte
	bool     in_payload; // inside a data frame's payload
	bool     fragmented; // a message with FIN = 0 awaits continuations
	bool     closed; // a close frame or an error was returned
} ws_decoder;

// A complete control frame (close, ping, pong), payload unmasked (for a
// close frame: the code's two bytes, then the reason).
typedef struct ws_control {
	uint8_t  opcode;
	uint8_t  len;
	uint16_t close_code; // WS_OP_CLOSE: the peer's code (1005 if none);
	                     // WS_DEC_ERROR: the code to close with;
	                     // 0 for ping and pong
	uint8_t payload[125];
} ws_control;

enum {
	WS_DEC_OK      = 0, // consumed all it could; wait for more bytes
	WS_DEC_CONTROL = 1, // *ctl holds a control frame; call again to go on
	WS_DEC_ERROR   = -1, // protocol error: close with ctl->close_code
};

// Decodes raw client bytes in place. buf[*raw .. len) are undecoded bytes;
// the unmasked payload of data frames is moved down to buf[*out ..], and
// both offsets advance (*out <= *raw always holds, so the decoded stream
// never overtakes the raw bytes). Stops at an incomplete frame header or an
// incomplete control frame (its bytes stay at *raw), or after a complete
// control frame (WS_DEC_CONTROL, the frame consumed). A data frame's
// payload is decoded as far as it has arrived.
//
// Errors (ctl->close_code): RSV bits set, an unmasked frame, an unknown
// opcode, a continuation without a message or a new message inside one, a
// fragmented or over-long (> 125) control frame, a 64-bit length with the
// top bit set, a close frame whose payload is 1 byte or whose code may not
// be sent (RFC 6455 section 7.4: below 1000, 1004-1006, 1015-2999, above
// 4999), offsets out of order (*out > *raw or *raw > len) -> 1002; a text
// frame -> 1003. Errors in the first two bytes of a header are reported as
// soon as those bytes are here. A length not in its shortest form is
// accepted. After WS_DEC_ERROR or a close frame the decoder returns
// WS_DEC_ERROR (code 1002) for any further call.
int ws_decode(ws_decoder *d, uint8_t *buf, size_t len, size_t *out, size_t *raw, ws_control *ctl);

// Writes the header of a server frame (FIN set, unmasked, minimal length
// encoding) into out. Returns its length: 2, 4 or 10.
size_t ws_frame_header(uint8_t out[10], uint8_t opcode, uint64_t payload_len);

#endif // NMQ_WS_CODEC_H
