// libFuzzer target for nanomq_cli's WebSocket client codec
// (tools/nanomq_cli/cli_ws.c), which reads what a server sends.
//
// 1. The input as the server's upgrade answer, fed in chunks whose sizes
//    the first byte chooses: the result never goes back from accepted or
//    refused, `used` stays within each chunk, and an accepted answer was
//    a 101.
// 2. The input after its first byte as server frames, unframed in chunks
//    (as cli_conn does, in place): the output of a chunk never exceeds its
//    input, both ways end in an error or neither does, and the payloads
//    agree (up to the chunk an error is in).
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/nanomq_cli/cli_ws.h"

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_cli_ws: check failed: %s (%s:%d)\n", #cond,          \
			    __FILE__, __LINE__);                                                   \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

// Unframes data in chunks of the sizes step gives; the payload goes to out
// (cap bytes). Returns its length; *err says whether it ended in an error.
static size_t unframe(const uint8_t *data, size_t len, unsigned step, uint8_t *out, bool *err)
{
	cli_ws  ws;
	char    why[200];
	uint8_t chunk[256];
	size_t  n = 0;
	memset(&ws, 0, sizeof(ws));
	ws.open = true;
	*err    = false;
	for (size_t off = 0; off < len;) {
		size_t k = step == 0 ? len - off : (off * 7 + step) % 250 + 1;
		if (k > len - off) {
			k = len - off;
		}
		if (k > sizeof(chunk)) {
			k = sizeof(chunk);
		}
		memcpy(chunk, data + off, k);
		long m = cli_ws_unframe(&ws, chunk, k, why, sizeof(why));
		if (m < 0) {
			*err = true;
			return n;
		}
		CHECK((size_t)m <= k);
		memcpy(out + n, chunk, (size_t)m);
		n += (size_t)m;
		off += k;
	}
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0) {
		return 0;
	}
	unsigned step = data[0];
	data++;
	size--;

	// 1. The upgrade answer.
	cli_ws ws;
	char   req[CLI_WS_REQ_MAX], why[200];
	CHECK(cli_ws_request(&ws, "localhost", 8083, "/mqtt", req, sizeof(req)) > 0);
	int last = 0;
	for (size_t off = 0; off < size && last == 0;) {
		size_t k = (off + step) % 64 + 1;
		if (k > size - off) {
			k = size - off;
		}
		size_t used = 0;
		last        = cli_ws_response(&ws, data + off, k, &used, why, sizeof(why));
		CHECK(used <= k);
		CHECK(last >= -1 && last <= 1);
		if (last == 1) {
			CHECK(ws.open && strncmp(ws.resp, "HTTP/1.1 101", 12) == 0);
		}
		off += k;
	}

	// 2. Frames, whole and in chunks.
	uint8_t *whole = malloc(size + 1), *chunked = malloc(size + 1);
	CHECK(whole != NULL && chunked != NULL);
	bool   e1, e2;
	size_t n1 = unframe(data, size, 0, whole, &e1);
	size_t n2 = unframe(data, size, step, chunked, &e2);
	// The whole input goes through in pieces of at most 256 bytes in the
	// first call too, so both see the same bytes in the same order.
	// An error drops the payload of the chunk it is in, so after one only
	// the common part is compared.
	CHECK(e1 == e2);
	CHECK(e1 || n1 == n2);
	CHECK(memcmp(whole, chunked, n1 < n2 ? n1 : n2) == 0);
	free(whole);
	free(chunked);
	return 0;
}
