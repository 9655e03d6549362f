// The WebSocket layer of nmq_conn (RFC 6455, MQTT over WebSocket), over
// either byte backend: ws:// on plain sockets, wss:// on NNG tls+tcp
// streams; see conn.h (conn_set_websocket) and
// docs/decisions/0002-websocket.md.
//
// Receive: the upgrade request is answered first; then frames are decoded
// in place in the connection's buffer, which holds [0, mq_len) decoded MQTT
// bytes not dispatched yet, then [mq_len, rx_len) raw bytes still to
// decode. Send: every batch of MQTT bytes goes out as one binary frame,
// whose header segment (WS_HDR_ROOM arena bytes reserved by tx_begin) is
// written when a write takes the queue (tx_seal).
#include <stdlib.h>
#include <string.h>

#include "nng/codec/ws_codec.h"
#include "nng/transport/conn_int.h"

#define WS_HDR_ROOM 10 // room reserved for a frame header (the longest)

typedef struct ws_side {
	conn_layer  base; // first: c->layer points here
	const char *path;
	bool        open; // the upgrade is done: bytes are framed both ways
	ws_decoder  dec;
	size_t      mq_len; // decoded MQTT bytes at the start of c->rx
	// Upgrade: bytes already searched for the blank line ending the request.
	size_t hs_scanned;
	// Send (mtx): the data frame being filled, whose header segment is
	// finished when a write takes it.
	bool   frame_open;
	bool   raw_out; // queue the next bytes unframed (control frames)
	bool   close_sent; // our close frame is queued
	size_t hdr_seg;
	size_t frame_start; // fill.bytes just after the header
} ws_side;

static const conn_layer_ops ws_ops;

static ws_side *ws_of(nmq_conn *c)
{
	return (ws_side *)c->layer;
}

// Makes c a WebSocket connection; see conn.h.
bool conn_set_websocket(nmq_conn *c, const char *path)
{
	ws_side *w = calloc(1, sizeof(*w));
	if (w == NULL) {
		return false;
	}
	w->base.ops = &ws_ops;
	w->path     = path;
	// The input is decoded in place in the connection's own buffer, never
	// in the worker's scratch buffer.
	if (c->rx == NULL) {
		c->rx = malloc(RX_INIT);
		if (c->rx == NULL) {
			free(w);
			return false;
		}
		c->rx_cap = RX_INIT;
	}
	c->rx_scratch = false;
	c->layer      = &w->base;
	return true;
}

static void ws_fini(nmq_conn *c)
{
	free(ws_of(c));
	c->layer = NULL;
}

// Ends the open data frame, if any, by writing its header for the bytes
// queued since (an empty frame is dropped). Called before a write takes
// the fill buffer and before a control frame is queued. Caller holds mtx.
static void ws_tx_seal(nmq_conn *c)
{
	ws_side *w = ws_of(c);
	txbuf   *b = &c->fill;
	if (!w->frame_open) {
		return;
	}
	w->frame_open = false;
	if (w->hdr_seg >= b->nsegs || b->bytes < w->frame_start) {
		return; // the buffer was emptied meanwhile (a close)
	}
	tx_seg *h      = &b->segs[w->hdr_seg];
	h->p           = NULL;
	size_t payload = b->bytes - w->frame_start;
	if (payload == 0 && w->hdr_seg == b->nsegs - 1) {
		b->nsegs--;
		b->arena_len -= WS_HDR_ROOM;
		b->bytes -= WS_HDR_ROOM;
		return;
	}
	uint8_t hdr[WS_HDR_ROOM];
	size_t  k = ws_frame_header(hdr, WS_OP_BINARY, payload);
	h->off += WS_HDR_ROOM - k;
	h->len = k;
	memcpy(b->arena + h->off, hdr, k);
	b->bytes -= WS_HDR_ROOM - k;
}

// Starts a data frame at the end of the fill buffer if the connection is
// open and no frame is, with a header segment of WS_HDR_ROOM arena bytes
// that ws_tx_seal fills in. Returns false on allocation failure.
static bool ws_tx_begin(nmq_conn *c)
{
	ws_side *w = ws_of(c);
	txbuf   *b = &c->fill;
	if (!w->open || w->frame_open || w->raw_out) {
		return true;
	}
	if (txbuf_reserve(b, WS_HDR_ROOM) == NULL || !txbuf_seg_room(b)) {
		return false;
	}
	w->hdr_seg = b->nsegs;
	txbuf_arena_seg_add(b, WS_HDR_ROOM);
	b->segs[w->hdr_seg].p = TXBUF_PINNED; // later bytes must not extend it
	w->frame_open         = true;
	w->frame_start        = b->bytes;
	return true;
}

// Queues bytes that are already framed (an HTTP response, a control frame)
// behind what is queued. Caller holds mtx.
static void ws_append_raw_locked(nmq_conn *c, const void *p, size_t n)
{
	ws_side *w = ws_of(c);
	ws_tx_seal(c);
	w->raw_out   = true;
	uint8_t *dst = conn_tx_reserve(c, n);
	if (dst != NULL) {
		memcpy(dst, p, n);
		conn_tx_commit(c, n);
	}
	w->raw_out = false;
}

static void ws_queue_raw(nmq_conn *c, const void *p, size_t n)
{
	nmq_mutex_lock(&c->mtx);
	ws_append_raw_locked(c, p, n);
	nmq_mutex_unlock(&c->mtx);
	conn_tx_flush_later(c);
}

// Queues our close frame with code, once, behind what is queued. Returns
// true if it was queued. Caller holds mtx.
static bool ws_close_locked(nmq_conn *c, uint16_t code)
{
	ws_side *w = ws_of(c);
	if (!w->open || w->close_sent || c->closing) {
		return false;
	}
	w->close_sent = true;
	uint8_t f[4]  = { 0x80 | WS_OP_CLOSE, 2, (uint8_t)(code >> 8), (uint8_t)code };
	ws_append_raw_locked(c, f, sizeof(f));
	return true;
}

// conn_shutdown: a WebSocket ends with a close frame (RFC 6455 §5.5.1)
// after what is queued, e.g. a DISCONNECT.
static bool ws_shutdown(nmq_conn *c)
{
	return ws_close_locked(c, WS_CLOSE_NORMAL);
}

// Sends a close frame with code, then closes once it is out.
static void ws_send_close(nmq_conn *c, uint16_t code)
{
	nmq_mutex_lock(&c->mtx);
	bool queued = ws_close_locked(c, code);
	nmq_mutex_unlock(&c->mtx);
	if (queued) {
		conn_tx_flush_later(c);
	}
	conn_shutdown(c);
}

// Answers the upgrade request once it is complete. Returns 1 when the
// connection is open (the request removed from the buffer), 0 while the
// request is incomplete, -1 when it was refused (the error response is on
// its way and the connection closes after it).
static int ws_handshake_step(nmq_conn *c)
{
	ws_side     *w = ws_of(c);
	ws_handshake hs;
	size_t       used = 0;
	char         resp[WS_HS_RESPONSE_MAX];
	// Parse only once the request is complete (or too long): a client
	// dribbling its request byte by byte then costs a scan of each new
	// byte, not a parse of the whole request per read.
	size_t from = w->hs_scanned > 2 ? w->hs_scanned - 2 : 0;
	bool   done = c->rx_len > WS_HS_MAX;
	for (size_t i = from; !done && i < c->rx_len; i++) {
		done = c->rx[i] == '\n'
		    && ((i + 1 < c->rx_len && c->rx[i + 1] == '\n')
		        || (i + 2 < c->rx_len && c->rx[i + 1] == '\r' && c->rx[i + 2] == '\n'));
	}
	w->hs_scanned = c->rx_len;
	memset(&hs, 0, sizeof(hs));
	hs.path = w->path;
	int r   = done ? ws_handshake_parse(&hs, c->rx, c->rx_len, &used) : WS_HS_NEED_MORE;
	if (r == WS_HS_NEED_MORE) {
		// The parser refuses a request of WS_HS_MAX bytes or more, so
		// this stops growing at twice that.
		if (c->rx_len + 64 > c->rx_cap) {
			return conn_rx_reserve(c, c->rx_cap * 2) ? 0 : -1;
		}
		return 0;
	}
	size_t n = ws_handshake_response(&hs, r == WS_HS_OK, resp, sizeof(resp));
	ws_queue_raw(c, resp, n);
	if (r != WS_HS_OK) {
		conn_shutdown(c);
		return -1;
	}
	nmq_mutex_lock(&c->mtx);
	w->open = true;
	nmq_mutex_unlock(&c->mtx);
	memmove(c->rx, c->rx + used, c->rx_len - used);
	c->rx_len -= used;
	w->mq_len = 0;
	return 1;
}

// Receive: the upgrade first, then the frames of the buffer are decoded in
// place into the MQTT stream, whose complete packets are dispatched.
// Returns false if reading must stop.
static bool ws_rx(nmq_conn *c)
{
	ws_side *w = ws_of(c);
	if (!w->open) {
		int r = ws_handshake_step(c);
		if (r <= 0) {
			return r == 0;
		}
	}
	size_t     out   = w->mq_len;
	size_t     raw   = w->mq_len;
	int        close = 0; // a close code to send once the data is handed up
	ws_control ctl;
	for (;;) {
		int r = ws_decode(&w->dec, c->rx, c->rx_len, &out, &raw, &ctl);
		if (r == WS_DEC_OK) {
			break;
		}
		if (r == WS_DEC_ERROR) {
			close = ctl.close_code;
			break;
		}
		if (ctl.opcode == WS_OP_PING) {
			uint8_t f[2 + sizeof(ctl.payload)];
			f[0] = 0x80 | WS_OP_PONG;
			f[1] = ctl.len;
			memcpy(f + 2, ctl.payload, ctl.len);
			ws_queue_raw(c, f, 2 + (size_t)ctl.len);
		} else if (ctl.opcode == WS_OP_CLOSE) {
			// Echo the peer's code (RFC 6455 §5.5.1); 1005 means none.
			close = ctl.close_code == 1005 ? WS_CLOSE_NORMAL : ctl.close_code;
			break;
		}
	}
	size_t used;
	size_t want;
	if (!conn_dispatch_frames(c, c->rx, out, &used, &want)) {
		return false;
	}
	if (close != 0) {
		ws_send_close(c, (uint16_t)close);
		return false;
	}
	// Keep the undispatched MQTT bytes, then the undecoded raw bytes.
	size_t mq   = out - used;
	size_t rest = c->rx_len - raw;
	memmove(c->rx, c->rx + used, mq);
	memmove(c->rx + mq, c->rx + raw, rest);
	w->mq_len = mq;
	c->rx_len = mq + rest;
	return conn_rx_size(c, want);
}

static const conn_layer_ops ws_ops = {
	.rx       = ws_rx,
	.tx_begin = ws_tx_begin,
	.tx_seal  = ws_tx_seal,
	.shutdown = ws_shutdown,
	.fini     = ws_fini,
};
