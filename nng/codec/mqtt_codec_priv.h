// Private helpers shared by the codec's source files: a bounded reader, a
// bounded writer that can also just count, and the property contexts.
// Nothing here is visible outside nng/codec/.
#ifndef NMQ_MQTT_CODEC_PRIV_H
#define NMQ_MQTT_CODEC_PRIV_H

#include <string.h>

#include "nng/codec/mqtt_codec.h"

// A read cursor over [p, end). Every read checks the bound first.
typedef struct mqtt_rd {
	const uint8_t *p;
	const uint8_t *end;
} mqtt_rd;

// Returns the number of unread bytes.
static inline size_t rd_left(const mqtt_rd *r)
{
	return (size_t)(r->end - r->p);
}

// Returns true and stores one byte, or false if the input is exhausted.
static inline bool rd_u8(mqtt_rd *r, uint8_t *v)
{
	if (rd_left(r) < 1) {
		return false;
	}
	*v = *r->p++;
	return true;
}

// Returns true and stores a big-endian 16-bit integer, or false if fewer
// than two bytes remain.
static inline bool rd_u16(mqtt_rd *r, uint16_t *v)
{
	if (rd_left(r) < 2) {
		return false;
	}
	*v = (uint16_t)(((uint16_t)r->p[0] << 8) | r->p[1]);
	r->p += 2;
	return true;
}

// Returns true and stores a big-endian 32-bit integer, or false if fewer
// than four bytes remain.
static inline bool rd_u32(mqtt_rd *r, uint32_t *v)
{
	if (rd_left(r) < 4) {
		return false;
	}
	*v = ((uint32_t)r->p[0] << 24) | ((uint32_t)r->p[1] << 16) | ((uint32_t)r->p[2] << 8)
	    | (uint32_t)r->p[3];
	r->p += 4;
	return true;
}

// Returns true and stores a variable byte integer, or false if it is
// truncated, longer than four bytes or not minimally encoded.
static inline bool rd_vbi(mqtt_rd *r, uint32_t *v)
{
	int n = mqtt_vbi_decode(r->p, rd_left(r), v);
	if (n <= 0) {
		return false;
	}
	r->p += n;
	return true;
}

// Returns true and points *b at a two-byte-length-prefixed field, or false
// if the field runs past the end of the input.
static inline bool rd_bin(mqtt_rd *r, mqtt_bytes *b)
{
	uint16_t len;
	if (!rd_u16(r, &len) || rd_left(r) < len) {
		return false;
	}
	b->p   = r->p;
	b->len = len;
	r->p += len;
	return true;
}

// Returns true and points *b at a UTF-8 string field, or false if the field
// is truncated or is not well-formed MQTT UTF-8.
static inline bool rd_utf8(mqtt_rd *r, mqtt_bytes *b)
{
	return rd_bin(r, b) && mqtt_utf8_valid(b->p, b->len);
}

// A write cursor. With buf == NULL it only counts (used to size packets, so
// that the size and the encoding come from the same code). Any overflow or
// invalid input sets err; later writes are then ignored.
typedef struct mqtt_wr {
	uint8_t *buf;
	size_t   cap;
	size_t   n;
	bool     err;
} mqtt_wr;

// Appends len bytes (or counts them); sets err if they do not fit.
static inline void wr_raw(mqtt_wr *w, const void *p, size_t len)
{
	if (w->err) {
		return;
	}
	if (w->buf != NULL) {
		if (w->cap - w->n < len) {
			w->err = true;
			return;
		}
		if (len > 0) {
			memcpy(w->buf + w->n, p, len);
		}
	}
	w->n += len;
}

// Appends one byte.
static inline void wr_u8(mqtt_wr *w, uint8_t v)
{
	wr_raw(w, &v, 1);
}

// Appends a big-endian 16-bit integer.
static inline void wr_u16(mqtt_wr *w, uint16_t v)
{
	uint8_t b[2] = { (uint8_t)(v >> 8), (uint8_t)v };
	wr_raw(w, b, 2);
}

// Appends a big-endian 32-bit integer.
static inline void wr_u32(mqtt_wr *w, uint32_t v)
{
	uint8_t b[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };
	wr_raw(w, b, 4);
}

// Appends a variable byte integer; sets err if v is above MQTT_VBI_MAX.
static inline void wr_vbi(mqtt_wr *w, uint32_t v)
{
	uint8_t b[4];
	size_t  n = mqtt_vbi_encode(b, v);
	if (n == 0) {
		w->err = true;
		return;
	}
	wr_raw(w, b, n);
}

// Appends a two-byte-length-prefixed field; sets err if it is longer than
// 65535 bytes or has a NULL pointer with a non-zero length.
static inline void wr_bin(mqtt_wr *w, mqtt_bytes b)
{
	if (b.len > 0xFFFF || (b.len > 0 && b.p == NULL)) {
		w->err = true;
		return;
	}
	wr_u16(w, (uint16_t)b.len);
	wr_raw(w, b.p, b.len);
}

// Property contexts: which packet (or the will block) a property block
// belongs to. Each has its own set of allowed identifiers.
enum mqtt_pctx {
	MQTT_PCTX_CONNECT,
	MQTT_PCTX_WILL,
	MQTT_PCTX_CONNACK,
	MQTT_PCTX_PUBLISH,
	MQTT_PCTX_ACK, // PUBACK, PUBREC, PUBREL, PUBCOMP
	MQTT_PCTX_SUBSCRIBE,
	MQTT_PCTX_SUBACK,
	MQTT_PCTX_UNSUBSCRIBE,
	MQTT_PCTX_UNSUBACK,
	MQTT_PCTX_DISCONNECT,
	MQTT_PCTX_AUTH,
	MQTT_PCTX_ANY, // every known property; used by mqtt_props_encode
};

// Decodes a property block (length VBI and properties) at r for context
// ctx into *out, advancing r. Returns 0 or an mqtt_reason.
int mqtt_props_decode_ctx(mqtt_rd *r, int ctx, mqtt_props *out);

// Writes (or counts) a property block with its length VBI for context ctx.
// Sets w->err if a property is not allowed there or a value is invalid.
void mqtt_props_write_ctx(mqtt_wr *w, int ctx, const mqtt_props *props);

// Validates a SUBSCRIBE payload for the version and counts its entries.
// Returns 0 or an mqtt_reason.
int mqtt_sub_list_check(const uint8_t *p, size_t len, uint8_t proto, uint32_t *count);

// Validates an UNSUBSCRIBE payload and counts its entries. Returns 0 or an
// mqtt_reason.
int mqtt_unsub_list_check(const uint8_t *p, size_t len, uint32_t *count);

// True if reason is a valid reason code for the packet type and version
// (for SUBACK/UNSUBACK: one entry of the payload).
bool mqtt_reason_valid(uint8_t type, uint8_t proto, uint8_t reason);

#endif // NMQ_MQTT_CODEC_PRIV_H
