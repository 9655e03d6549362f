// The client side of MQTT over WebSocket (RFC 6455) for nanomq_cli: the
// upgrade request and its answer, masked binary frames out, frames in
// turned back into the plain byte stream. Pure functions over buffers;
// cli_conn does the I/O (on plain TCP or TLS alike).
//
// Threading: a cli_ws belongs to its connection's loop thread.
#ifndef NMQ_CLIENT_CLI_WS_H
#define NMQ_CLIENT_CLI_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLI_WS_REQ_MAX 1024 // room for the upgrade request
#define CLI_WS_HDR_MAX 14 // largest client frame header (with the mask)

typedef struct cli_ws {
	char   key[25]; // Sec-WebSocket-Key sent (base64 of 16 bytes)
	bool   open; // the 101 answer arrived and checked
	char   resp[2048]; // the answer so far, until its blank line
	size_t resp_len;
	// Frame being decoded.
	uint8_t  hdr[CLI_WS_HDR_MAX];
	size_t   hdr_len;
	bool     in_frame; // a header was read; left bytes of payload follow
	uint64_t left; // payload bytes of the current frame still to come
	uint8_t  opcode; // of the current frame
	bool     masked;
	uint8_t  mask[4];
	uint64_t mpos; // position in the payload, for the mask
	uint8_t  ctl[125]; // a control frame's payload
	size_t   ctl_len;
	// Control frames to answer (pong) or act on (close), for cli_conn.
	bool    want_pong;
	uint8_t pong[125];
	size_t  pong_len;
	bool    closed; // a close frame arrived
} cli_ws;

// Prepares ws and writes the upgrade request for host:port and path into
// out. Returns its length, or 0 if it does not fit in cap.
size_t cli_ws_request(
    cli_ws *ws, const char *host, uint16_t port, const char *path, char *out, size_t cap);

// Feeds bytes of the server's answer. Returns 1 once the answer is complete
// and accepts the upgrade (*used: the bytes of buf it took; the rest are
// frames), 0 if more is needed, or -1 with a reason in why.
int cli_ws_response(
    cli_ws *ws, const uint8_t *buf, size_t len, size_t *used, char *why, size_t whylen);

// Turns frames in buf[0..len) into their payload, in place, and returns the
// payload length (data frames only; pings and the close are recorded in
// ws). Returns -1 with a reason in why for a frame a client must refuse.
long cli_ws_unframe(cli_ws *ws, uint8_t *buf, size_t len, char *why, size_t whylen);

// Writes the header of one masked frame of len bytes into hdr (opcode 2
// binary, 10 pong, 8 close), and masks payload in place with the key in
// the header. Returns the header length.
size_t cli_ws_frame(uint8_t hdr[CLI_WS_HDR_MAX], uint8_t opcode, uint8_t *payload, size_t len);

#endif // NMQ_CLIENT_CLI_WS_H
