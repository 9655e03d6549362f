// libFuzzer target for the store's offline segments (store_oseg.c): the
// blobs a store reads back from its file at open after a crash, and when
// a session's segments become queue rows or are evicted
// (decisions/0053). A file is hostile input: any bytes must parse or be
// refused, never read out of bounds.
//
// Checked: every entry a parse hands lies inside the blob, in order, with
// a topic of the length it says and no NUL in it, QoS 1 or 2 (the
// message's at most 2), a seq and expiry SQLite can store; parsing twice,
// with and without a callback, gives the same count.

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/store/store_int.h"

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_store_oseg: check failed: %s (%s:%d)\n", #cond,      \
			    __FILE__, __LINE__);                                                   \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

typedef struct blob {
	const uint8_t *p;
	size_t         len, last_end;
} blob;

static bool inside(const blob *b, const void *q, size_t n)
{
	const uint8_t *u = q;
	return n == 0 || (u >= b->p && u + n <= b->p + b->len);
}

static int on_entry(void *arg, const store_oent *e)
{
	blob *b = arg;
	CHECK(e->end > b->last_end && e->end <= b->len);
	b->last_end = e->end;
	CHECK(e->qos == 1 || e->qos == 2);
	CHECK(e->mqos <= 2);
	CHECK(e->seq <= INT64_MAX && e->expiry_wall <= INT64_MAX);
	CHECK(e->topic_len > 0 && inside(b, e->topic, e->topic_len));
	CHECK(memchr(e->topic, '\0', e->topic_len) == NULL);
	CHECK(inside(b, e->props, e->props_len) && inside(b, e->payload, e->payload_len));
	CHECK(e->n_ids == 0 || e->ids != NULL);
	for (uint16_t i = 0; i < e->n_ids; i++) {
		volatile uint32_t id = e->ids[i];
		(void)id;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	// A copy of exactly the blob's size, so that reading past it is seen.
	uint8_t *p = malloc(size ? size : 1);
	if (p == NULL) {
		return 0;
	}
	memcpy(p, data, size);
	blob b  = { p, size, 0 };
	long n1 = store_oseg_parse(p, size, on_entry, &b);
	long n2 = store_oseg_parse(p, size, NULL, NULL);
	CHECK(n1 == n2);
	CHECK(n1 < 0 || b.last_end == size);
	free(p);
	return 0;
}
