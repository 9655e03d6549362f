// The send buffer of a connection; see conn_int.h.
//
// Small bytes (fixed headers, acks, PUBLISH heads) are copied into an arena
// and payloads are referenced inside their shared message, so a delivery
// costs no allocation once the first blocks are there (from conn_pool.c).
// Every block is counted in the memory accountant (nmq_mem_buffers_add).
// Guarded by the owning connection's mutex.
#include <stdlib.h>
#include <string.h>

#include "nng/transport/conn_int.h"

const uint8_t txbuf_pin_mark;

// Returns the blocks of an empty txbuf; see conn_int.h.
void txbuf_release_blocks(txbuf *b)
{
	if (b->arena_cap != 0 || b->seg_cap != 0) {
		nmq_mem_buffers_add(-(int64_t)(b->arena_cap + (size_t)b->seg_cap * sizeof(tx_seg)));
	}
	if (b->arena_cap == POOL_ARENA) {
		conn_pool_put(b->arena, false);
	} else {
		free(b->arena);
	}
	if (b->seg_cap == POOL_SEGS) {
		conn_pool_put(b->segs, true);
	} else {
		free(b->segs);
	}
	b->arena     = NULL;
	b->arena_cap = 0;
	b->segs      = NULL;
	b->seg_cap   = 0;
}

// Releases every message reference and empties; see conn_int.h.
void txbuf_reset(txbuf *b)
{
	for (size_t i = 0; i < b->nsegs; i++) {
		if (b->segs[i].ref != NULL) {
			nmq_msg_release(b->segs[i].ref);
		}
	}
	b->nsegs     = 0;
	b->arena_len = 0;
	b->bytes     = 0;
	// Give back large blocks so that an idle connection stays small.
	if (b->arena_cap > 64 * 1024 || b->seg_cap > 256) {
		txbuf_release_blocks(b);
	}
}

void txbuf_fini(txbuf *b)
{
	txbuf_reset(b);
	txbuf_release_blocks(b);
}

// Grows the segment array; see conn_int.h.
bool txbuf_seg_grow(txbuf *b)
{
	if (b->seg_cap == 0) {
		b->segs = conn_pool_get(true);
		if (b->segs == NULL) {
			return false;
		}
		b->seg_cap = POOL_SEGS;
		nmq_mem_buffers_add((int64_t)(POOL_SEGS * sizeof(tx_seg)));
		return true;
	}
	size_t  ncap = b->seg_cap * 2;
	tx_seg *ns;
	if (b->seg_cap == POOL_SEGS) {
		// Leave the pool's block: move to a malloc'd array.
		ns = malloc(ncap * sizeof(*ns));
		if (ns != NULL) {
			memcpy(ns, b->segs, b->nsegs * sizeof(*ns));
			conn_pool_put(b->segs, true);
		}
	} else {
		ns = realloc(b->segs, ncap * sizeof(*ns));
	}
	if (ns == NULL) {
		return false;
	}
	nmq_mem_buffers_add((int64_t)((ncap - b->seg_cap) * sizeof(tx_seg)));
	b->segs    = ns;
	b->seg_cap = ncap;
	return true;
}

// Grows the arena for n more bytes; see conn_int.h.
uint8_t *txbuf_reserve_slow(txbuf *b, size_t n)
{
	if (b->arena_cap == 0 && n <= POOL_ARENA) {
		b->arena = conn_pool_get(false);
		if (b->arena == NULL) {
			return NULL;
		}
		b->arena_cap = POOL_ARENA;
		nmq_mem_buffers_add(POOL_ARENA);
		return b->arena;
	}
	size_t ncap = b->arena_cap ? b->arena_cap : POOL_ARENA;
	while (ncap < b->arena_len + n) {
		ncap *= 2;
	}
	uint8_t *na;
	if (b->arena_cap == POOL_ARENA) {
		na = malloc(ncap);
		if (na != NULL) {
			memcpy(na, b->arena, b->arena_len);
			conn_pool_put(b->arena, false);
		}
	} else {
		na = realloc(b->arena, ncap);
	}
	if (na == NULL) {
		return NULL;
	}
	nmq_mem_buffers_add((int64_t)(ncap - b->arena_cap));
	b->arena     = na;
	b->arena_cap = ncap;
	return b->arena + b->arena_len;
}
