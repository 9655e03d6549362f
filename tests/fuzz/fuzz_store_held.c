// libFuzzer target for the store's held rows (store_hold.c): the blobs a
// store reads back from its file at open, after a crash (decisions/0045).
// A file is hostile input: any bytes must parse or be refused, never read
// out of bounds.
//
// Input: one byte choosing the parser (even: entries, odd: done records),
// then the blob. Checked: a parse that succeeds hands every entry with a
// client id of the length it says, without a NUL, a message row id above
// 0, QoS 1 or 2, a seq SQLite can store, and parsing twice gives the
// same count.

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/store/store_int.h"

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_store_held: check failed: %s (%s:%d)\n", #cond,      \
			    __FILE__, __LINE__);                                                   \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

static int on_entry(void *arg, const store_hent *e)
{
	(void)arg;
	CHECK(e->cid_len > 0 && memchr(e->cid, '\0', e->cid_len) == NULL);
	CHECK(e->msg_id > 0 && (e->qos == 1 || e->qos == 2));
	CHECK(e->seq <= INT64_MAX); // a queue row's seq is an SQLite integer
	for (uint16_t i = 0; i < e->n_ids; i++) {
		volatile uint32_t id = e->ids[i];
		(void)id;
	}
	return 0;
}

static int on_done(void *arg, const char *cid, uint16_t len, uint64_t hi)
{
	(void)arg;
	(void)hi;
	CHECK(len > 0 && memchr(cid, '\0', len) == NULL);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1) {
		return 0;
	}
	// A copy of exactly the blob's size, so that reading past it is seen.
	size_t   n = size - 1;
	uint8_t *p = malloc(n ? n : 1);
	if (p == NULL) {
		return 0;
	}
	memcpy(p, data + 1, n);
	if (data[0] % 2 == 0) {
		long a = store_hold_parse(p, n, on_entry, NULL);
		long b = store_hold_parse(p, n, NULL, NULL);
		CHECK(a == b);
	} else {
		long a = store_hold_parse_dones(p, n, on_done, NULL);
		long b = store_hold_parse_dones(p, n, NULL, NULL);
		CHECK(a == b);
	}
	free(p);
	return 0;
}
