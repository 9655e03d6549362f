// Unit tests of the webhook payload encoding (src/events/webhook.c):
// base62 in groups of 8 bytes, checked against values computed by hand
// (big-endian integer of each group in base 62, fixed width per group).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "src/events/webhook.h"

static void check(const char *in, size_t n, const char *want)
{
	char out[64];
	assert_int_equal(webhook_base62_len(n), strlen(want));
	webhook_base62((const uint8_t *)in, n, out);
	assert_string_equal(out, want);
}

static void test_base62(void **state)
{
	(void)state;
	check("", 0, "");
	check("\xff", 1, "47"); // 255 = 4 * 62 + 7
	check("\0", 1, "00");
	check("\xff\xff\xff\xff\xff\xff\xff\xff", 8, "LygHa16AHYF"); // 2^64 - 1
	// Two groups: "hello wo" (11 digits) and "rld" (5 digits).
	check("hello world", 11, "8xhIpNzLldv0VSnE");
	// Every group length has its width: 2 3 5 6 7 9 10 11.
	static const size_t widths[9] = { 0, 2, 3, 5, 6, 7, 9, 10, 11 };
	for (size_t k = 0; k <= 8; k++) {
		assert_int_equal(webhook_base62_len(k), widths[k]);
		assert_int_equal(webhook_base62_len(16 + k), 22 + widths[k]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_base62),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
